// Hand-written twin of moye/examples/wgmma_matmul.py (bN = 128), for
// benchmarks/compile_time.py. C = A * B^T: A (M, K), B (N, K) row-major fp16,
// C (M, N) row-major fp32. One warpgroup (128 threads) per 64 x 128 tile of C,
// looping over K by 64: thread 0 TMA-loads A's (64, 64) and B's (128, 64)
// tiles into 128B-swizzled shared memory, completing on an mbarrier whose
// phase flips each k-tile; the warpgroup waits, issues four
// wgmma.m64n128k16 from shared-memory descriptors, waits for them, and a
// barrier frees the tiles. M a multiple of 64, N of 128, K of 64. sm_90a.
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

#define BM 64
#define BN 128
#define BK 64

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// a K-major 128B-swizzled tile: swizzle mode 1 (bit 62), stride between 8-row
// groups 1024 bytes (bits 32-45, >> 4), leading byte offset 16 (bits 16-29, >> 4)
__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {
  return 0x4000004000010000ull | (unsigned long long)((addr & 0x3FFFFu) >> 4);
}

__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], unsigned long long da,
                                                 unsigned long long db) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0; }\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(da), "l"(db), "r"(1) : "memory");
}

extern "C" __global__ void __launch_bounds__(128)
wgmma_matmul_twin(float* C, int M, int N, int ldc, const __grid_constant__ TensorMap load_a,
                  const __grid_constant__ TensorMap load_b, int k_tiles) {
  __shared__ __align__(1024) unsigned short sA[BM * BK];
  __shared__ __align__(1024) unsigned short sB[BN * BK];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned s_a = smem_u32(sA), s_b = smem_u32(sB), s_bar = smem_u32(&bar);
  const int tid = threadIdx.x, m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  float d[64];
  #pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(s_bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  for (int k = 0; k < k_tiles; ++k) {
    if (tid == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                   :: "r"(s_bar), "r"((BM + BN) * BK * 2) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                   " [%0], [%1, {%2, %3}], [%4];\n"
                   :: "r"(s_a), "l"(&load_a), "r"(k * BK), "r"(m0), "r"(s_bar) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                   " [%0], [%1, {%2, %3}], [%4];\n"
                   :: "r"(s_b), "l"(&load_b), "r"(k * BK), "r"(n0), "r"(s_bar) : "memory");
    }
    unsigned done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                   "selp.u32 %0, 1, 0, p; }\n" : "=r"(done) : "r"(s_bar), "r"(k % 2) : "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    #pragma unroll
    for (int s = 0; s < BK / 16; ++s)          // 16 fp16 = 32 bytes along K per step
      wgmma_m64n128k16(d, descriptor(s_a + 32 * s), descriptor(s_b + 32 * s));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    __syncthreads();
  }
  // the accumulators' layout: warp w, lane l hold rows 16w + l/4 (+ 8) and
  // columns 8i + 2(l%4) (+ 1)
  const int warp = tid / 32, lane = tid % 32;
  const int r = m0 + 16 * warp + lane / 4;
  #pragma unroll
  for (int i = 0; i < BN / 8; ++i) {
    const int c = n0 + 8 * i + 2 * (lane % 4);
    *reinterpret_cast<float2*>(&C[r * ldc + c]) = make_float2(d[4 * i], d[4 * i + 1]);
    *reinterpret_cast<float2*>(&C[(r + 8) * ldc + c]) = make_float2(d[4 * i + 2], d[4 * i + 3]);
  }
}

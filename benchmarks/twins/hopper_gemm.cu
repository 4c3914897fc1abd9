// Hand-written twin of moye/examples/hopper_gemm.py (fp16, cluster 1), for
// benchmarks/compile_time.py: a warp-specialized, persistent Hopper GEMM.
// C = A @ B^T: A (M, K), B (N, K), C (M, N) row-major fp16, fp32 accumulation.
// One block of 384 threads per multiprocessor walks the 128 x 256 output tiles
// in columns of 8 tile rows:
// - warpgroup 0, the producer, gives registers back (setmaxnreg 40) and one
//   thread TMA-loads A's (128, 64) and B's (256, 64) tiles into a ring of 4
//   128B-swizzled stages, each with a full and an empty mbarrier;
// - warpgroups 1 and 2, the consumers (setmaxnreg 232), each own 64 rows: wait
//   for a stage, issue 4 wgmma.m64n256k16 from it, and release the previous
//   stage (lane 0 of each warp) once the next k-tile's wgmma are in flight;
// - epilogue: each consumer warpgroup converts its accumulators to fp16 and
//   writes them with stmatrix into 64 x 64 128B-swizzled boxes (2 slots each),
//   which one of its threads TMA-stores while the producer loads on.
// sm_90a; TMA clips the tiles that overhang A, B and C.
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

#define BM 128
#define BN 256
#define BK 64
#define STAGES 4
#define EPI 64
#define EPI_SLOTS 2
#define GROUP 8
#define A_STAGE_BYTES (BM * BK * 2)
#define B_STAGE_BYTES (BN * BK * 2)
#define BOX_BYTES (EPI * EPI * 2)

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {  // K-major, 128B swizzle
  return 0x4000004000010000ull | (unsigned long long)((addr & 0x3FFFFu) >> 4);
}
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned phase) {
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }\n" : "=r"(done) : "r"(bar), "r"(phase) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap* map, int x, int y,
                                         unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
__device__ __forceinline__ void named_barrier(int id) {
  asm volatile("bar.sync %0, 128;\n" :: "r"(id) : "memory");
}
__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long da,
                                                 unsigned long long db) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
               "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
               "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0; }\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                 "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                 "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                 "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                 "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                 "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                 "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                 "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(da), "l"(db), "r"(1) : "memory");
}

// the four k-steps of one k-tile from stage `s`, for this consumer warpgroup's 64 rows
__device__ __forceinline__ void mma_k_tile(float (&d)[128], unsigned s_a, unsigned s_b) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  #pragma unroll
  for (int k = 0; k < BK / 16; ++k)
    wgmma_m64n256k16(d, descriptor(s_a + 32 * k), descriptor(s_b + 32 * k));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& m, int& n) {
  const int per_group = GROUP * tiles_n, first_m = t / per_group * GROUP;
  const int rows = min(tiles_m - first_m, GROUP);
  m = first_m + t % per_group % rows;
  n = t % per_group / rows;
}

extern "C" __global__ void __launch_bounds__(384, 1)
hopper_gemm_twin(const __grid_constant__ TensorMap load_a, const __grid_constant__ TensorMap load_b,
                 const __grid_constant__ TensorMap store_c, int M, int N, int K) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned s_a = smem_u32(smem);                            // [STAGES][BM][BK]
  const unsigned s_b = s_a + STAGES * A_STAGE_BYTES;              // [STAGES][BN][BK]
  const unsigned s_c = s_b + STAGES * B_STAGE_BYTES;              // [2 * EPI_SLOTS][EPI][EPI]
  const unsigned full = s_c + 2 * EPI_SLOTS * BOX_BYTES, empty = full + 8 * STAGES;
  const int tid = threadIdx.x;
  if (tid == 0) {
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(full + 8 * s) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;\n" :: "r"(empty + 8 * s) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int k_tiles = (K + BK - 1) / BK, n_tiles = tiles_m * tiles_n;
  int stage = 0, phase = 0, m, n;
  if (tid / 128 == 0) {                                           // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) {
      for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        tile_coords(t, tiles_m, tiles_n, m, n);
        for (int k = 0; k < k_tiles; ++k) {
          mbarrier_wait(empty + 8 * stage, phase ^ 1);
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                       :: "r"(full + 8 * stage), "r"(A_STAGE_BYTES + B_STAGE_BYTES) : "memory");
          tma_load(s_a + stage * A_STAGE_BYTES, &load_a, k * BK, m * BM, full + 8 * stage);
          tma_load(s_b + stage * B_STAGE_BYTES, &load_b, k * BK, n * BN, full + 8 * stage);
          if (++stage == STAGES) stage = 0, phase ^= 1;
        }
      }
    }
  } else {                                                        // the consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int ctid = tid - 128, wg = ctid / 128, warp = ctid / 32 % 4, lane = ctid % 32;
    const bool lane0 = lane == 0, storer = ctid % 128 == 0;
    const unsigned a_rows = wg * 64 * BK * 2;                     // this warpgroup's 64 rows of A
    float d[128];
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
      tile_coords(t, tiles_m, tiles_n, m, n);
      #pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.f;
      mbarrier_wait(full + 8 * stage, phase);
      mma_k_tile(d, s_a + stage * A_STAGE_BYTES + a_rows, s_b + stage * B_STAGE_BYTES);
      int last = stage;
      if (++stage == STAGES) stage = 0, phase ^= 1;
      for (int k = 1; k < k_tiles; ++k) {
        mbarrier_wait(full + 8 * stage, phase);
        mma_k_tile(d, s_a + stage * A_STAGE_BYTES + a_rows, s_b + stage * B_STAGE_BYTES);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (lane0) mbarrier_arrive(empty + 8 * last);
        last = stage;
        if (++stage == STAGES) stage = 0, phase ^= 1;
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      if (lane0) mbarrier_arrive(empty + 8 * last);
      // epilogue: four 64 x 64 boxes of this warpgroup's rows
      #pragma unroll
      for (int j = 0; j < BN / EPI; ++j) {
        const unsigned slot = s_c + (wg * EPI_SLOTS + j % EPI_SLOTS) * BOX_BYTES;
        if (storer) asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(EPI_SLOTS - 1) : "memory");
        named_barrier(1 + wg);
        #pragma unroll
        for (int q = 0; q < EPI / 16; ++q) {       // 8-column groups 2q, 2q + 1 of the box
          const float* v = d + 32 * j + 8 * q;
          const int mat = lane / 8;
          const int row = 16 * warp + 8 * (mat % 2) + lane % 8, col = 16 * q + 8 * (mat / 2);
          const int off = row * EPI + col;                      // halves; swizzled 16-byte chunks
          const unsigned addr = slot + 2 * (off ^ ((off >> 3) & 0x38));
          asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                       :: "r"(addr), "r"(pack_half2(v[0], v[1])), "r"(pack_half2(v[2], v[3])),
                          "r"(pack_half2(v[4], v[5])), "r"(pack_half2(v[6], v[7])) : "memory");
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        named_barrier(1 + wg);
        if (storer) {
          asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                       :: "l"(&store_c), "r"(n * BN + j * EPI), "r"(m * BM + wg * 64), "r"(slot)
                       : "memory");
          asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        }
      }
    }
    if (storer) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}

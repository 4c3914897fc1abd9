// Hand-written twin of moye/examples/tma_copy.py's tma_copy_kernel (fp16,
// (64, 64) tiles, 128 threads), for benchmarks/compile_time.py: one thread
// TMA-loads the block's tile into a 128B-swizzled shared tile, completing on
// an mbarrier every thread waits on, and TMA-stores it back. The tensor maps
// (CUtensorMap, made on the host with the 128B swizzle) come as
// __grid_constant__ parameters. sm_90a.
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

#define TILE_M 64
#define TILE_N 64
#define TILE_BYTES (TILE_M * TILE_N * 2)

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

extern "C" __global__ void __launch_bounds__(128)
tma_copy_twin(const __grid_constant__ TensorMap load, const __grid_constant__ TensorMap store) {
  __shared__ __align__(1024) unsigned short tile[TILE_M * TILE_N];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned s_tile = smem_u32(tile), s_bar = smem_u32(&bar);
  const int m0 = blockIdx.x * TILE_M, n0 = blockIdx.y * TILE_N;
  const bool leader = threadIdx.x == 0;
  if (leader) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(s_bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (leader) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(s_bar), "r"(TILE_BYTES) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(s_tile), "l"(&load), "r"(n0), "r"(m0), "r"(s_bar) : "memory");
  }
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; "
                 "selp.u32 %0, 1, 0, p; }\n" : "=r"(done) : "r"(s_bar) : "memory");
  if (leader) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"(&store), "r"(n0), "r"(m0), "r"(s_tile) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}

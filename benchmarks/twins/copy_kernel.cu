// Hand-written twin of moye/examples/copy_kernel.py's copy_kernel (seed 003),
// for benchmarks/compile_time.py: dst = src, float32 column-major (M, N), one
// 32x32 tile per block through unpadded shared memory; 32x8 threads, each
// copying rows threadIdx.x % 32 of columns threadIdx.x / 32 + 8 * i.
extern "C" __global__ void __launch_bounds__(256)
copy_kernel_twin(float* dst, const float* src, int M, int N, int ld_dst, int ld_src) {
  __shared__ float smem[32 * 32];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const float* s = src + blockIdx.x * 32 + blockIdx.y * 32 * ld_src;
  float* d = dst + blockIdx.x * 32 + blockIdx.y * 32 * ld_dst;
  #pragma unroll
  for (int i = 0; i < 4; ++i) smem[tx + 32 * (ty + 8 * i)] = s[tx + (ty + 8 * i) * ld_src];
  __syncthreads();
  #pragma unroll
  for (int i = 0; i < 4; ++i) d[tx + (ty + 8 * i) * ld_dst] = smem[tx + 32 * (ty + 8 * i)];
}

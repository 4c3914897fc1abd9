// Hand-written twin of moye/examples/transpose.py (seed 003), for
// benchmarks/compile_time.py: dst (N, M) = src (M, N)^T, float32
// column-major; one 32x32 tile per block through a (32,32):(1,33) shared
// tile; 32x8 threads, each moving elements (tx, ty + 8 * i).
extern "C" __global__ void __launch_bounds__(256)
transpose_twin(float* dst, const float* src, int M, int N, int ld_dst, int ld_src) {
  __shared__ float smem[32 * 33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const float* s = src + blockIdx.x * 32 + blockIdx.y * 32 * ld_src;
  float* d = dst + blockIdx.y * 32 + blockIdx.x * 32 * ld_dst;
  #pragma unroll
  for (int i = 0; i < 4; ++i) smem[tx + 33 * (ty + 8 * i)] = s[tx + (ty + 8 * i) * ld_src];
  __syncthreads();
  #pragma unroll
  for (int i = 0; i < 4; ++i) d[tx + (ty + 8 * i) * ld_dst] = smem[(ty + 8 * i) + 33 * tx];
}

// Hand-written twin of moye/examples/matmul_smem.py (seed 002), for
// benchmarks/compile_time.py: C = A * B^T, float32 column-major, A (M, K),
// B (N, K), C (M, N). A 128x128 tile of C per block of 32x8 threads; (128, 8)
// tiles of A and B through shared memory; thread (tx, ty) accumulates rows
// tx + 32 * m and columns ty + 8 * n (4 x 16). M, N multiples of 128, K of 8.
extern "C" __global__ void __launch_bounds__(256)
matmul_smem_twin(const float* A, const float* B, float* C, int M, int N, int K, int lda,
                 int ldb, int ldc) {
  __shared__ float sA[128 * 8], sB[128 * 8];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const float* gA = A + blockIdx.x * 128;
  const float* gB = B + blockIdx.y * 128;
  float acc[4][16];
  #pragma unroll
  for (int m = 0; m < 4; ++m)
    #pragma unroll
    for (int n = 0; n < 16; ++n) acc[m][n] = 0.f;
  for (int k0 = 0; k0 < K; k0 += 8) {
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
      sA[tx + 32 * i + 128 * ty] = gA[tx + 32 * i + (k0 + ty) * lda];
      sB[tx + 32 * i + 128 * ty] = gB[tx + 32 * i + (k0 + ty) * ldb];
    }
    __syncthreads();
    #pragma unroll
    for (int k = 0; k < 8; ++k)
      #pragma unroll
      for (int m = 0; m < 4; ++m)
        #pragma unroll
        for (int n = 0; n < 16; ++n) acc[m][n] += sA[tx + 32 * m + 128 * k] * sB[ty + 8 * n + 128 * k];
    __syncthreads();
  }
  float* gC = C + blockIdx.x * 128 + blockIdx.y * 128 * ldc;
  #pragma unroll
  for (int m = 0; m < 4; ++m)
    #pragma unroll
    for (int n = 0; n < 16; ++n) gC[tx + 32 * m + (ty + 8 * n) * ldc] = acc[m][n];
}

// Hand-written twin of moye/examples/tiled_matmul.py (seed 000), for
// benchmarks/compile_time.py: C = A * B^T, float32 column-major, A (M, K),
// B (N, K), C (M, N). 128x128x8 block tiles in padded (128,8):(1,129) shared
// tiles, 256 threads; the next tile's global loads go to registers while the
// current tile is multiplied. Thread (tx, ty) = (t % 32, t / 32) copies rows
// tx + 32 * i of column ty, and accumulates rows tx + 32 * m and columns
// ty + 8 * n (4 x 16). M, N multiples of 128, K of 8.
extern "C" __global__ void __launch_bounds__(256)
tiled_matmul_twin(const float* A, const float* B, float* C, int M, int N, int K, int lda,
                  int ldb, int ldc) {
  __shared__ float sA[129 * 8], sB[129 * 8];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const float* gA = A + blockIdx.x * 128 + ty * lda;
  const float* gB = B + blockIdx.y * 128 + ty * ldb;
  float acc[4][16], rA[4], rB[4];
  #pragma unroll
  for (int m = 0; m < 4; ++m)
    #pragma unroll
    for (int n = 0; n < 16; ++n) acc[m][n] = 0.f;
  #pragma unroll
  for (int i = 0; i < 4; ++i) {
    rA[i] = gA[tx + 32 * i];
    rB[i] = gB[tx + 32 * i];
  }
  const int k_tiles = K / 8;
  for (int k = 0; k < k_tiles; ++k) {
    __syncthreads();
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
      sA[tx + 32 * i + 129 * ty] = rA[i];
      sB[tx + 32 * i + 129 * ty] = rB[i];
    }
    __syncthreads();
    const int next = min(k + 1, k_tiles - 1);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
      rA[i] = gA[tx + 32 * i + next * 8 * lda];
      rB[i] = gB[tx + 32 * i + next * 8 * ldb];
    }
    #pragma unroll
    for (int kk = 0; kk < 8; ++kk)
      #pragma unroll
      for (int m = 0; m < 4; ++m)
        #pragma unroll
        for (int n = 0; n < 16; ++n)
          acc[m][n] = fmaf(sA[tx + 32 * m + 129 * kk], sB[ty + 8 * n + 129 * kk], acc[m][n]);
  }
  float* gC = C + blockIdx.x * 128 + blockIdx.y * 128 * ldc;
  #pragma unroll
  for (int m = 0; m < 4; ++m)
    #pragma unroll
    for (int n = 0; n < 16; ++n) gC[tx + 32 * m + (ty + 8 * n) * ldc] = acc[m][n];
}

// NVIDIA CUTLASS's own Ampere-style GEMM (the 2.x device API: cp.async multistage,
// ldmatrix, mma.sync m16n8k16) beside cuBLAS on the same random normal tensors: how
// far a tuned mma.sync GEMM gets on this GPU, the reference for moye/examples/gemm.py.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I<cutlass>/include benchmarks/cutlass_sm80_gemm.cu \
//        -lcublas -o cutlass_sm80_gemm && ./cutlass_sm80_gemm [M N K] > out.json
//
// D = A @ B^T, A (M, K) and B (N, K) row-major (K-major), D (M, N) row-major, fp16 or
// bf16 in and out, fp32 accumulation. Each configuration's output is checked against
// cuBLAS's (relative Frobenius norm) before timing; then CUTLASS and cuBLAS are timed
// alternately (5 rounds, each the median of 20 CUDA-event timed runs after warm-up).
// The headers come from scripts/fetch_cutlass.sh (gitignored), not from this repository.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cutlass/bfloat16.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/half.h"

#define CHECK(call)                                                                    \
  do {                                                                                 \
    auto status_ = (call);                                                             \
    if (status_ != 0) {                                                                \
      std::fprintf(stderr, "%s:%d: %s failed with %d\n", __FILE__, __LINE__, #call,     \
                   int(status_));                                                      \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

template <class Element, int TM, int TN, int TK, int Stages>
using SM80Gemm = cutlass::gemm::device::Gemm<
    Element, cutlass::layout::RowMajor,        // A (M, K)
    Element, cutlass::layout::ColumnMajor,     // B as (K, N) column-major: (N, K) row-major
    Element, cutlass::layout::RowMajor,        // C, D (M, N)
    float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<TM, TN, TK>, cutlass::gemm::GemmShape<64, 64, TK>,
    cutlass::gemm::GemmShape<16, 8, 16>,
    cutlass::epilogue::thread::LinearCombination<Element, 8, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages>;

struct Problem {
  int M, N, K;
  void *A, *B, *D, *ref;
  cudaDataType_t type;
  size_t bytes_per_element;
};

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// milliseconds per run: the median of `iters` CUDA-event timed runs
template <class F>
static float time_ms(F run, int iters = 20) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < iters; ++i) {
    CHECK(cudaEventRecord(start));
    run();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return median(times);
}

static void cublas_gemm(cublasHandle_t handle, const Problem& p, void* out) {
  // column-major view: D^T (N, M) = B (N, K) . A^T (K, M)
  float alpha = 1.f, beta = 0.f;
  CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, p.N, p.M, p.K, &alpha, p.B, p.type, p.K,
                     p.A, p.type, p.K, &beta, out, p.type, p.N, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT));
}

template <class Element>
static double rel_error(const Problem& p) {
  size_t n = size_t(p.M) * p.N;
  std::vector<Element> got(n), want(n);
  CHECK(cudaMemcpy(got.data(), p.D, n * sizeof(Element), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), p.ref, n * sizeof(Element), cudaMemcpyDeviceToHost));
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    double g = float(got[i]), w = float(want[i]);
    diff += (g - w) * (g - w);
    norm += w * w;
  }
  return std::isfinite(diff) ? std::sqrt(diff / norm) : INFINITY;
}

template <class Gemm>
static void run_config(cublasHandle_t handle, const Problem& p, const char* dtype,
                       const char* config, bool& first) {
  using Element = typename Gemm::ElementA;
  typename Gemm::Arguments args({p.M, p.N, p.K}, {(Element*)p.A, p.K}, {(Element*)p.B, p.K},
                                {(Element*)p.D, p.N}, {(Element*)p.D, p.N}, {1.f, 0.f});
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    std::fprintf(stderr, "%s %s: CUTLASS cannot implement %dx%dx%d\n", config, dtype, p.M, p.N,
                 p.K);
    return;
  }
  CHECK(int(gemm.initialize(args)));
  CHECK(cudaMemset(p.D, 0xff, size_t(p.M) * p.N * p.bytes_per_element));   // NaN poison
  CHECK(int(gemm()));
  CHECK(cudaDeviceSynchronize());
  double err = rel_error<Element>(p);
  auto ours = [&] { gemm(); };
  auto theirs = [&] { cublas_gemm(handle, p, p.ref); };
  for (int i = 0; i < 10; ++i) ours(), theirs();     // warm-up
  std::vector<float> t_cutlass, t_cublas;
  for (int round = 0; round < 5; ++round) {
    t_cutlass.push_back(time_ms(ours));
    t_cublas.push_back(time_ms(theirs));
  }
  double flop = 2.0 * p.M * p.N * p.K;
  double cutlass_tflops = flop / median(t_cutlass) / 1e9, cublas_tflops = flop / median(t_cublas) / 1e9;
  std::printf("%s{\"dtype\": \"%s\", \"config\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, "
              "\"rel_error_vs_cublas\": %.3e, \"cutlass_tflops\": %.1f, \"cublas_tflops\": %.1f, "
              "\"ratio\": %.3f}\n",
              first ? "" : ",", dtype, config, p.M, p.N, p.K, err, cutlass_tflops, cublas_tflops,
              cutlass_tflops / cublas_tflops);
  std::fprintf(stderr, "%-9s %-18s %dx%dx%d  CUTLASS %6.1f TFLOP/s  cuBLAS %6.1f  ratio %.3f  "
               "err %.1e\n", dtype, config, p.M, p.N, p.K, cutlass_tflops, cublas_tflops,
               cutlass_tflops / cublas_tflops, err);
  first = false;
}

template <class Element>
static Problem make_problem(int M, int N, int K, cudaDataType_t type, std::mt19937& rng) {
  Problem p{M, N, K, nullptr, nullptr, nullptr, nullptr, type, sizeof(Element)};
  std::normal_distribution<float> normal;
  for (auto [ptr, n] : {std::pair{&p.A, size_t(M) * K}, std::pair{&p.B, size_t(N) * K}}) {
    std::vector<Element> host(n);
    for (auto& x : host) x = Element(normal(rng));
    CHECK(cudaMalloc(ptr, n * sizeof(Element)));
    CHECK(cudaMemcpy(*ptr, host.data(), n * sizeof(Element), cudaMemcpyHostToDevice));
  }
  CHECK(cudaMalloc(&p.D, size_t(M) * N * sizeof(Element)));
  CHECK(cudaMalloc(&p.ref, size_t(M) * N * sizeof(Element)));
  return p;
}

static void free_problem(Problem& p) {
  for (void* ptr : {p.A, p.B, p.D, p.ref}) CHECK(cudaFree(ptr));
}

int main(int argc, char** argv) {
  int M = 8192, N = 8192, K = 8192;
  if (argc == 4) M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
  cublasHandle_t handle;
  CHECK(cublasCreate(&handle));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::mt19937 rng(0);
  std::printf("{\"device\": \"%s\", \"rows\": [\n", prop.name);
  bool first = true;
  {
    using T = cutlass::half_t;
    Problem p = make_problem<T>(M, N, K, CUDA_R_16F, rng);
    cublas_gemm(handle, p, p.ref);
    run_config<SM80Gemm<T, 256, 128, 64, 3>>(handle, p, "float16", "256x128x64 s3", first);
    run_config<SM80Gemm<T, 128, 256, 64, 3>>(handle, p, "float16", "128x256x64 s3", first);
    run_config<SM80Gemm<T, 128, 128, 64, 4>>(handle, p, "float16", "128x128x64 s4", first);
    run_config<SM80Gemm<T, 128, 128, 32, 5>>(handle, p, "float16", "128x128x32 s5", first);
    free_problem(p);
  }
  {
    using T = cutlass::bfloat16_t;
    Problem p = make_problem<T>(M, N, K, CUDA_R_16BF, rng);
    cublas_gemm(handle, p, p.ref);
    run_config<SM80Gemm<T, 256, 128, 64, 3>>(handle, p, "bfloat16", "256x128x64 s3", first);
    run_config<SM80Gemm<T, 128, 256, 64, 3>>(handle, p, "bfloat16", "128x256x64 s3", first);
    free_problem(p);
  }
  std::printf("]}\n");
  CHECK(cublasDestroy(handle));
  return 0;
}

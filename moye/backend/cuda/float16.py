"""moye's own 16-bit float types for NVRTC, in place of CUDA's cuda_fp16.h
and cuda_bf16.h: 17,000 lines whose parsing was most of NVRTC's time on a
small kernel (27 of 69 ms) and tens of ms on a large one.

`PRELUDE` defines what generated C++ uses of those headers, under CUDA's
names: `half` and `__nv_bfloat16` with their implicit conversions from and
to the arithmetic types; their arithmetic and comparisons; the pairs
`__half2` and `__nv_bfloat162`; the bit casts (`__ushort_as_half`, ...);
and atomicAdd of each type and pair.

Semantics, where they are the headers' or differ:
- Arithmetic and comparisons run in float, and a result rounds once to
  the 16-bit type. For +, -, * and / that is the correctly rounded result
  (float has more than twice the 16-bit significand's bits, plus two), so
  it equals add.f16 and friends. Division is correctly rounded, where
  CUDA's __hdiv is approximate; the CPU backend's NumPy division is
  correctly rounded too.
- A double or a 64-bit integer rounds once: it narrows to float rounding
  to odd (toward zero, its last bit set where bits were dropped), which
  then rounds to 16 bits exactly as the value itself would.
- Conversion to an integer truncates and saturates, NaN giving 0
  (cvt.rzi), as CUDA's.
"""

PRELUDE = r"""// 16-bit floats under CUDA's names (moye/backend/cuda/float16.py). Each cvt is one
// braced asm line, the shape CUDA's headers give theirs: NVVM weighs inline asm by its
// text when it decides how far to unroll a loop, so kernels keep the headers' SASS.
__device__ __forceinline__ float moye_round_to_odd(double d) {
  float f;
  asm("{ cvt.rz.f32.f64 %0, %1;}\n" : "=f"(f) : "d"(d));
  return static_cast<double>(f) != d && d == d ? __uint_as_float(__float_as_uint(f) | 1u) : f;
}
__device__ __forceinline__ double moye_odd_double(long long i) {
  double d;
  asm("{ cvt.rz.f64.s64 %0, %1;}\n" : "=d"(d) : "l"(i));
  return static_cast<long long>(d) != i ? __longlong_as_double(__double_as_longlong(d) | 1) : d;
}
__device__ __forceinline__ double moye_odd_double(unsigned long long i) {
  double d;
  asm("{ cvt.rz.f64.u64 %0, %1;}\n" : "=d"(d) : "l"(i));
  return static_cast<unsigned long long>(d) != i
      ? __longlong_as_double(__double_as_longlong(d) | 1) : d;
}
__device__ __forceinline__ int moye_truncate_s32(float f) {
  int i;
  asm("{ cvt.rzi.s32.f32 %0, %1;}\n" : "=r"(i) : "f"(f));
  return i;
}
__device__ __forceinline__ unsigned moye_truncate_u32(float f) {
  unsigned i;
  asm("{ cvt.rzi.u32.f32 %0, %1;}\n" : "=r"(i) : "f"(f));
  return i;
}
__device__ __forceinline__ long long moye_truncate_s64(float f) {
  long long i;
  asm("{ cvt.rzi.s64.f32 %0, %1;}\n" : "=l"(i) : "f"(f));
  return i;
}
__device__ __forceinline__ unsigned long long moye_truncate_u64(float f) {
  unsigned long long i;
  asm("{ cvt.rzi.u64.f32 %0, %1;}\n" : "=l"(i) : "f"(f));
  return i;
}

// Kind 0 is IEEE binary16 (half), kind 1 is bfloat16; x holds the bits.
template <int Kind> struct __align__(2) moye_float16 {
  unsigned short x;
  static __device__ __forceinline__ unsigned short bits_of(float f) {
    unsigned short h;
    if constexpr (Kind == 0) {
      asm("{ cvt.rn.f16.f32 %0, %1;}\n" : "=h"(h) : "f"(f));
    } else {
#if __CUDA_ARCH__ >= 800
      asm("{ cvt.rn.bf16.f32 %0, %1;}\n" : "=h"(h) : "f"(f));
#else
      const unsigned u = __float_as_uint(f);
      h = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fff
          : static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
    }
    return h;
  }
  moye_float16() = default;
  __device__ moye_float16(float f) : x(bits_of(f)) {}
  __device__ moye_float16(double d) : x(bits_of(moye_round_to_odd(d))) {}
  __device__ moye_float16(short i) : moye_float16(static_cast<float>(i)) {}
  __device__ moye_float16(unsigned short i) : moye_float16(static_cast<float>(i)) {}
  __device__ moye_float16(int i) : moye_float16(static_cast<double>(i)) {}
  __device__ moye_float16(unsigned int i) : moye_float16(static_cast<double>(i)) {}
  __device__ moye_float16(long i) : moye_float16(moye_odd_double(static_cast<long long>(i))) {}
  __device__ moye_float16(unsigned long i)
      : moye_float16(moye_odd_double(static_cast<unsigned long long>(i))) {}
  __device__ moye_float16(long long i) : moye_float16(moye_odd_double(i)) {}
  __device__ moye_float16(unsigned long long i) : moye_float16(moye_odd_double(i)) {}
  __device__ explicit moye_float16(moye_float16<1 - Kind> other)
      : moye_float16(static_cast<float>(other)) {}

  __device__ operator float() const {
    float f;
    if constexpr (Kind == 0) {
      asm("{ cvt.f32.f16 %0, %1;}\n" : "=f"(f) : "h"(x));
    } else {
#if __CUDA_ARCH__ >= 900
      asm("{ cvt.f32.bf16 %0, %1;}\n" : "=f"(f) : "h"(x));
#else
      asm("{ mov.b32 %0, {0, %1};}\n" : "=f"(f) : "h"(x));     // the bits above 16 zeros
#endif
    }
    return f;
  }
  __device__ operator signed char() const { return max(-128, min(127, moye_truncate_s32(*this))); }
  __device__ operator unsigned char() const { return min(255u, moye_truncate_u32(*this)); }
  __device__ operator char() const { return static_cast<char>(static_cast<signed char>(*this)); }
  __device__ operator short() const { return max(-32768, min(32767, moye_truncate_s32(*this))); }
  __device__ operator unsigned short() const { return min(65535u, moye_truncate_u32(*this)); }
  __device__ operator int() const { return moye_truncate_s32(*this); }
  __device__ operator unsigned int() const { return moye_truncate_u32(*this); }
  __device__ operator long() const { return moye_truncate_s64(*this); }
  __device__ operator unsigned long() const { return moye_truncate_u64(*this); }
  __device__ operator long long() const { return moye_truncate_s64(*this); }
  __device__ operator unsigned long long() const { return moye_truncate_u64(*this); }
  __device__ operator bool() const { return (x & 0x7fffu) != 0; }

  friend __device__ moye_float16 operator+(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) + static_cast<float>(b); }
  friend __device__ moye_float16 operator-(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) - static_cast<float>(b); }
  friend __device__ moye_float16 operator*(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) * static_cast<float>(b); }
  friend __device__ moye_float16 operator/(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) / static_cast<float>(b); }
  friend __device__ moye_float16 operator-(moye_float16 a) { a.x ^= 0x8000u; return a; }
  friend __device__ moye_float16 operator+(moye_float16 a) { return a; }
  friend __device__ moye_float16& operator+=(moye_float16& a, moye_float16 b) { return a = a + b; }
  friend __device__ moye_float16& operator-=(moye_float16& a, moye_float16 b) { return a = a - b; }
  friend __device__ moye_float16& operator*=(moye_float16& a, moye_float16 b) { return a = a * b; }
  friend __device__ moye_float16& operator/=(moye_float16& a, moye_float16 b) { return a = a / b; }
  friend __device__ bool operator==(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) == static_cast<float>(b); }
  friend __device__ bool operator!=(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) != static_cast<float>(b); }
  friend __device__ bool operator<(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) < static_cast<float>(b); }
  friend __device__ bool operator<=(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) <= static_cast<float>(b); }
  friend __device__ bool operator>(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) > static_cast<float>(b); }
  friend __device__ bool operator>=(moye_float16 a, moye_float16 b) {
    return static_cast<float>(a) >= static_cast<float>(b); }
};
typedef moye_float16<0> half;
typedef moye_float16<1> __nv_bfloat16;
struct __align__(4) __half2 { half x, y; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };

__device__ __forceinline__ half __ushort_as_half(unsigned short i) { half h; h.x = i; return h; }
__device__ __forceinline__ unsigned short __half_as_ushort(half h) { return h.x; }
__device__ __forceinline__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short i) {
  __nv_bfloat16 h; h.x = i; return h; }
__device__ __forceinline__ unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }

// atomicAdd: relaxed, device scope; the 16-bit sum rounds once, as an add's
__device__ __forceinline__ half atomicAdd(half* p, half v) {
  half old;
  asm volatile("atom.add.noftz.f16 %0, [%1], %2;" : "=h"(old.x) : "l"(p), "h"(v.x) : "memory");
  return old;
}
__device__ __forceinline__ __half2 atomicAdd(__half2* p, __half2 v) {
  unsigned old, add = *reinterpret_cast<unsigned*>(&v);
  asm volatile("atom.add.noftz.f16x2 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(add) : "memory");
  return *reinterpret_cast<__half2*>(&old);
}
__device__ __forceinline__ __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  __nv_bfloat16 old;
#if __CUDA_ARCH__ >= 900
  asm volatile("atom.add.noftz.bf16 %0, [%1], %2;" : "=h"(old.x) : "l"(p), "h"(v.x) : "memory");
#else
  unsigned short* word = reinterpret_cast<unsigned short*>(p);
  unsigned short seen;
  old.x = *word;
  do {
    seen = old.x;
    old.x = atomicCAS(word, seen, (__ushort_as_bfloat16(seen) + v).x);
  } while (old.x != seen);
#endif
  return old;
}
__device__ __forceinline__ __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
  unsigned old;
#if __CUDA_ARCH__ >= 900
  unsigned add = *reinterpret_cast<unsigned*>(&v);
  asm volatile("atom.add.noftz.bf16x2 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(add) : "memory");
#else
  unsigned* word = reinterpret_cast<unsigned*>(p);
  unsigned seen;
  old = *word;
  do {
    seen = old;
    __nv_bfloat162 sum = *reinterpret_cast<__nv_bfloat162*>(&seen);
    sum.x += v.x;
    sum.y += v.y;
    old = atomicCAS(word, seen, *reinterpret_cast<unsigned*>(&sum));
  } while (old != seen);
#endif
  return *reinterpret_cast<__nv_bfloat162*>(&old);
}
"""


def needs_float16(body):
    """Whether C++ `body` names a 16-bit float: every one is spelled with
    "half" or "bfloat16" (its type, its bit casts, its pairs)."""
    return "half" in body or "bfloat16" in body

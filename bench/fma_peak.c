// The CPU's float32 FMA peak, measured: a loop of independent fused multiply-adds on
// registers only (no memory), 256-bit (AVX2/FMA) and 512-bit (AVX-512F), on 1 and on N
// threads at once. No GEMM, training step or library can compute faster than this, so it is
// the ceiling against which bench/cpu.sh's GEMM and step rates (and PyTorch's) are read.
//
//   cc -O2 -mavx512f -mfma -pthread bench/fma_peak.c -o /tmp/fma_peak && /tmp/fma_peak 2
//
// Prints one JSON line per (width, threads): GFLOP/s (2 flops per lane per FMA), the best of
// 5 runs of about 0.4 s each.
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define ITERS 20000000L

// 12 independent accumulators: enough to cover the FMA latency (4 cycles) × 2 pipes and more.
static float run256(void) {
    __m256 a0 = _mm256_set1_ps((float)0 * 1e-3f);
    __m256 a1 = _mm256_set1_ps((float)1 * 1e-3f);
    __m256 a2 = _mm256_set1_ps((float)2 * 1e-3f);
    __m256 a3 = _mm256_set1_ps((float)3 * 1e-3f);
    __m256 a4 = _mm256_set1_ps((float)4 * 1e-3f);
    __m256 a5 = _mm256_set1_ps((float)5 * 1e-3f);
    __m256 a6 = _mm256_set1_ps((float)6 * 1e-3f);
    __m256 a7 = _mm256_set1_ps((float)7 * 1e-3f);
    __m256 a8 = _mm256_set1_ps((float)8 * 1e-3f);
    __m256 a9 = _mm256_set1_ps((float)9 * 1e-3f);
    __m256 a10 = _mm256_set1_ps((float)10 * 1e-3f);
    __m256 a11 = _mm256_set1_ps((float)11 * 1e-3f);
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long n = 0; n < ITERS; n++) {
        a0 = _mm256_fmadd_ps(a0, b, c);
        a1 = _mm256_fmadd_ps(a1, b, c);
        a2 = _mm256_fmadd_ps(a2, b, c);
        a3 = _mm256_fmadd_ps(a3, b, c);
        a4 = _mm256_fmadd_ps(a4, b, c);
        a5 = _mm256_fmadd_ps(a5, b, c);
        a6 = _mm256_fmadd_ps(a6, b, c);
        a7 = _mm256_fmadd_ps(a7, b, c);
        a8 = _mm256_fmadd_ps(a8, b, c);
        a9 = _mm256_fmadd_ps(a9, b, c);
        a10 = _mm256_fmadd_ps(a10, b, c);
        a11 = _mm256_fmadd_ps(a11, b, c);
    }
    __m256 s = a0;
    s = _mm256_add_ps(s, a1);
    s = _mm256_add_ps(s, a2);
    s = _mm256_add_ps(s, a3);
    s = _mm256_add_ps(s, a4);
    s = _mm256_add_ps(s, a5);
    s = _mm256_add_ps(s, a6);
    s = _mm256_add_ps(s, a7);
    s = _mm256_add_ps(s, a8);
    s = _mm256_add_ps(s, a9);
    s = _mm256_add_ps(s, a10);
    s = _mm256_add_ps(s, a11);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

static float run512(void) {
    __m512 a0 = _mm512_set1_ps((float)0 * 1e-3f);
    __m512 a1 = _mm512_set1_ps((float)1 * 1e-3f);
    __m512 a2 = _mm512_set1_ps((float)2 * 1e-3f);
    __m512 a3 = _mm512_set1_ps((float)3 * 1e-3f);
    __m512 a4 = _mm512_set1_ps((float)4 * 1e-3f);
    __m512 a5 = _mm512_set1_ps((float)5 * 1e-3f);
    __m512 a6 = _mm512_set1_ps((float)6 * 1e-3f);
    __m512 a7 = _mm512_set1_ps((float)7 * 1e-3f);
    __m512 a8 = _mm512_set1_ps((float)8 * 1e-3f);
    __m512 a9 = _mm512_set1_ps((float)9 * 1e-3f);
    __m512 a10 = _mm512_set1_ps((float)10 * 1e-3f);
    __m512 a11 = _mm512_set1_ps((float)11 * 1e-3f);
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long n = 0; n < ITERS; n++) {
        a0 = _mm512_fmadd_ps(a0, b, c);
        a1 = _mm512_fmadd_ps(a1, b, c);
        a2 = _mm512_fmadd_ps(a2, b, c);
        a3 = _mm512_fmadd_ps(a3, b, c);
        a4 = _mm512_fmadd_ps(a4, b, c);
        a5 = _mm512_fmadd_ps(a5, b, c);
        a6 = _mm512_fmadd_ps(a6, b, c);
        a7 = _mm512_fmadd_ps(a7, b, c);
        a8 = _mm512_fmadd_ps(a8, b, c);
        a9 = _mm512_fmadd_ps(a9, b, c);
        a10 = _mm512_fmadd_ps(a10, b, c);
        a11 = _mm512_fmadd_ps(a11, b, c);
    }
    __m512 s = a0;
    s = _mm512_add_ps(s, a1);
    s = _mm512_add_ps(s, a2);
    s = _mm512_add_ps(s, a3);
    s = _mm512_add_ps(s, a4);
    s = _mm512_add_ps(s, a5);
    s = _mm512_add_ps(s, a6);
    s = _mm512_add_ps(s, a7);
    s = _mm512_add_ps(s, a8);
    s = _mm512_add_ps(s, a9);
    s = _mm512_add_ps(s, a10);
    s = _mm512_add_ps(s, a11);
    return _mm512_reduce_add_ps(s);
}


// AVX512-BF16's vdpbf16ps: per float32 lane, two bf16 products added to the sum (4 flops per
// lane per instruction, as GEMM rates count them). The ceiling of the bf16 products.
__attribute__((target("avx512f,avx512bf16"))) static float runbf16(void) {
    // Twelve different starting sums: started equal, the twelve chains are the same
    // computation and the compiler keeps one (GCC -O2 did), and the loop timed one
    // instruction's latency per 12 counted: twice the true peak on a Zen 4.
    __m512 a0 = _mm512_set1_ps(0 * 1e-3f), a1 = _mm512_set1_ps(1 * 1e-3f), a2 = _mm512_set1_ps(2 * 1e-3f);
    __m512 a3 = _mm512_set1_ps(3 * 1e-3f), a4 = _mm512_set1_ps(4 * 1e-3f), a5 = _mm512_set1_ps(5 * 1e-3f);
    __m512 a6 = _mm512_set1_ps(6 * 1e-3f), a7 = _mm512_set1_ps(7 * 1e-3f), a8 = _mm512_set1_ps(8 * 1e-3f);
    __m512 a9 = _mm512_set1_ps(9 * 1e-3f), a10 = _mm512_set1_ps(10 * 1e-3f), a11 = _mm512_set1_ps(11 * 1e-3f);
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f), c = (__m512bh)_mm512_set1_epi32(0x33d633d6);
    for (long n = 0; n < ITERS; n++) {
        a0 = _mm512_dpbf16_ps(a0, b, c);
        a1 = _mm512_dpbf16_ps(a1, b, c);
        a2 = _mm512_dpbf16_ps(a2, b, c);
        a3 = _mm512_dpbf16_ps(a3, b, c);
        a4 = _mm512_dpbf16_ps(a4, b, c);
        a5 = _mm512_dpbf16_ps(a5, b, c);
        a6 = _mm512_dpbf16_ps(a6, b, c);
        a7 = _mm512_dpbf16_ps(a7, b, c);
        a8 = _mm512_dpbf16_ps(a8, b, c);
        a9 = _mm512_dpbf16_ps(a9, b, c);
        a10 = _mm512_dpbf16_ps(a10, b, c);
        a11 = _mm512_dpbf16_ps(a11, b, c);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

static int width;
static volatile float sink;

static void *worker(void *arg) {
    (void)arg;
    sink = width == 16 ? runbf16() : width == 512 ? run512() : run256();
    return NULL;
}

int main(int argc, char **argv) {
    int max_threads = argc > 1 ? atoi(argv[1]) : 2;
    // 16: the bf16 dot product (printed as "bf16", with the flops of its float32 lanes).
    int widths[3] = {256, 512, 16};
    for (int w = 0; w < 3; w++) {
        width = widths[w];
        if (width == 16 && !__builtin_cpu_supports("avx512bf16")) break;
        // A CPU without AVX-512F (AMD Zen 3 and older, Intel client cores) has the 256-bit
        // peak only: the 512-bit loop would die of SIGILL and take the 256-bit figures with it.
        if (width == 512 && !__builtin_cpu_supports("avx512f")) break;
        for (int t = 1; t <= max_threads; t++) {
            double best = 0;
            for (int round = 0; round < 5; round++) {
                pthread_t th[64];
                double t0 = now();
                for (int i = 0; i < t; i++) pthread_create(&th[i], NULL, worker, NULL);
                for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
                double dt = now() - t0;
                double flops = width == 16 ? (double)t * ITERS * 12 * 16 * 4 : (double)t * ITERS * 12 * (width / 32) * 2;
                if (flops / dt > best) best = flops / dt;
            }
            if (width == 16)
                printf("{\"width\": 512, \"kind\": \"bf16\", \"threads\": %d, \"gflops\": %.1f}\n", t, best / 1e9);
            else
                printf("{\"width\": %d, \"threads\": %d, \"gflops\": %.1f}\n", width, t, best / 1e9);
            fflush(stdout);
        }
    }
    return 0;
}

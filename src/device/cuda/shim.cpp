// The host shim: compiles kernels.cu with the system C++ compiler so that `cargo test` runs
// every kernel's logic on the CPU (src/device/cuda/shim.rs checks it against the CPU backend).
// A launch is a loop over the grid: blockIdx/threadIdx/blockDim/gridDim are thread-local
// globals that the loop sets before calling the kernel once per (block, thread). The
// kernels' threads are independent (no shared memory, no synchronisation), so running them
// one after another computes what the GPU computes. Built by build.rs with -ffp-contract=off:
// like Rust, no multiply-add is fused, so the two sides round alike.

#include <math.h>
#include <string.h>

struct hv_dim3 {
    unsigned int x, y, z;
};
static thread_local hv_dim3 blockIdx, threadIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline

static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#include "kernels.cu"

// Runs `kernel(args...)` once for every thread of a [grid] x [block] launch.
template <typename... Params, typename... Args>
static void launch(unsigned int grid, unsigned int block, void (*kernel)(Params...), Args... args) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned int b = 0; b < grid; ++b) {
        for (unsigned int t = 0; t < block; ++t) {
            blockIdx = {b, 0, 0};
            threadIdx = {t, 0, 0};
            kernel(args...);
        }
    }
}

typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;

extern "C" {

void hvshim_hv_fill(u32 g, u32 b, float* v, i64 n, float value) { launch(g, b, hv_fill, v, n, value); }

void hvshim_hv_gather_rows(u32 g, u32 b, float* dst, const float* src, const int* idx, i64 rows, int cols) {
    launch(g, b, hv_gather_rows, dst, src, idx, rows, cols);
}

void hvshim_hv_bias_act(u32 g, u32 b, float* out, const float* bias, float* keep_z, i64 rows, int cols, int act,
                        u16* low) {
    launch(g, b, hv_bias_act, out, bias, keep_z, rows, cols, act, low);
}

void hvshim_hv_act_backward(u32 g, u32 b, float* d, const float* a, const float* z, i64 n, int act, u16* low) {
    launch(g, b, hv_act_backward, d, a, z, n, act, low);
}

void hvshim_hv_softmax_xent(u32 g, u32 b, const float* logits, const int* labels, const float* cw, i64 rows, int k,
                            float grad_scale, float* d, float* row_loss, int* row_correct) {
    launch(g, b, hv_softmax_xent, logits, labels, cw, rows, k, grad_scale, d, row_loss, row_correct);
}

void hvshim_hv_softmax_xent_smooth(u32 g, u32 b, const float* logits, const int* labels, const float* cw, i64 rows,
                                   int k, float eps, float grad_scale, float* d, float* row_loss, int* row_correct) {
    launch(g, b, hv_softmax_xent_smooth, logits, labels, cw, rows, k, eps, grad_scale, d, row_loss, row_correct);
}

void hvshim_hv_pointwise_loss(u32 g, u32 b, const float* pred, const float* target, i64 rows, int k, int mode,
                              float delta, float grad_scale, float* d, float* row_loss, int* row_correct) {
    launch(g, b, hv_pointwise_loss, pred, target, rows, k, mode, delta, grad_scale, d, row_loss, row_correct);
}

void hvshim_hv_regression_loss(u32 g, u32 b, const float* pred, const float* target, i64 rows, int k, int mode,
                               float tau, float grad_scale, float* d, float* row_loss, int* row_correct) {
    launch(g, b, hv_regression_loss, pred, target, rows, k, mode, tau, grad_scale, d, row_loss, row_correct);
}

void hvshim_hv_binary_xent_smooth(u32 g, u32 b, const float* pred, const float* target, i64 rows, int k, float eps,
                                  float grad_scale, float* d, float* row_loss, int* row_correct) {
    launch(g, b, hv_binary_xent_smooth, pred, target, rows, k, eps, grad_scale, d, row_loss, row_correct);
}

void hvshim_hv_weigh_rows(u32 g, u32 b, float* row_loss, float* d, const float* rw, i64 rows, int k) {
    launch(g, b, hv_weigh_rows, row_loss, d, rw, rows, k);
}

void hvshim_hv_dropout(u32 g, u32 b, float* v, i64 rows, int cols, const int* keys, unsigned long long salt, u32 col0,
                       u32 threshold, float scale) {
    launch(g, b, hv_dropout, v, rows, cols, keys, salt, col0, threshold, scale);
}

void hvshim_hv_softmax_rows(u32 g, u32 b, float* v, i64 rows, int k) { launch(g, b, hv_softmax_rows, v, rows, k); }

void hvshim_hv_sgd(u32 g, u32 b, float* p, const float* grad, float* m, i64 n, float lr, float grad_scale, float wd,
                   float mu, int nesterov, u16* low) {
    launch(g, b, hv_sgd, p, grad, m, n, lr, grad_scale, wd, mu, nesterov, low);
}

void hvshim_hv_adam(u32 g, u32 b, float* p, const float* grad, float* m, float* v, i64 n, float lr, float grad_scale,
                    float b1, float b2, float eps, float bc1, float bc2_sqrt, float l2, float decay, u16* low) {
    launch(g, b, hv_adam, p, grad, m, v, n, lr, grad_scale, b1, b2, eps, bc1, bc2_sqrt, l2, decay, low);
}

void hvshim_hv_pack_f16(u32 g, u32 b, const float* x, u16* out, i64 n) { launch(g, b, hv_pack_f16, x, out, n); }
void hvshim_hv_unpack_f16(u32 g, u32 b, const u16* in, float* out, i64 n) { launch(g, b, hv_unpack_f16, in, out, n); }
void hvshim_hv_pack_bf16(u32 g, u32 b, const float* x, u16* out, i64 n) { launch(g, b, hv_pack_bf16, x, out, n); }
void hvshim_hv_unpack_bf16(u32 g, u32 b, const u16* in, float* out, i64 n) {
    launch(g, b, hv_unpack_bf16, in, out, n);
}
void hvshim_hv_round_bf16(u32 g, u32 b, float* x, i64 n) { launch(g, b, hv_round_bf16, x, n); }

void hvshim_hv_sgd_seg(u32 g, u32 b, float* p, const float* grad, float* m, i64 n, hv_segs segs, float lr,
                       float grad_scale, float wd, float mu, int nesterov, u16* low) {
    launch(g, b, hv_sgd_seg, p, grad, m, n, segs, lr, grad_scale, wd, mu, nesterov, low);
}
void hvshim_hv_adam_seg(u32 g, u32 b, float* p, const float* grad, float* m, float* v, i64 n, hv_segs segs, float lr,
                        float grad_scale, float b1, float b2, float eps, float bc1, float bc2_sqrt, float l2,
                        float decay, u16* low) {
    launch(g, b, hv_adam_seg, p, grad, m, v, n, segs, lr, grad_scale, b1, b2, eps, bc1, bc2_sqrt, l2, decay, low);
}
void hvshim_hv_sum_squares(u32 g, u32 b, const float* v, i64 n, double* partial, int parts) {
    launch(g, b, hv_sum_squares, v, n, partial, parts);
}
void hvshim_hv_clamp(u32 g, u32 b, float* v, i64 n, float bound, int* changed, int parts) {
    launch(g, b, hv_clamp, v, n, bound, changed, parts);
}

}  // extern "C"

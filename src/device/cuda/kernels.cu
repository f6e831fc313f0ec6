// hvtrain's element-wise GPU kernels: one source, compiled two ways.
//  - On a GPU node, NVRTC compiles it at run time (once per process, for the device's own
//    architecture); `make test` also compiles it with the real NVRTC, without a GPU, to PTX
//    for compute_70 and to SASS for sm_80 and sm_90 (src/device/cuda/nvrtc.rs).
//  - In `cargo test`, the system C++ compiler compiles it through a host shim
//    (src/device/cuda/shim.cpp), where a launch is a loop over the grid, and each kernel is
//    checked against the CPU backend (src/device/cpu/) on random shapes.
// So: no __shared__, no __syncthreads, no atomics, no intrinsics the shim lacks. Every kernel
// is a grid-stride loop (any grid size is correct) over elements or over rows; reductions
// that would need a block (the loss sums) write one value per row, which the host adds.
// Numbers follow src/device/cpu/ operation by operation, so the two agree to rounding.
//
// Activations: 0 identity, 1 relu, 2 tanh, 3 gelu (tanh approximation), 4 silu, 5 sigmoid,
// 6 softplus, 7 elu, 8 selu, 9 leaky_relu (slope 0.2) (launch.rs act_code). Pointers documented
// "may be null" are passed as 0 when absent.

#define HV_GRID_STRIDE(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)blockDim.x * gridDim.x)

#define HV_IDENTITY 0
#define HV_RELU 1
#define HV_TANH 2
#define HV_GELU 3
#define HV_SILU 4
#define HV_SIGMOID 5
#define HV_SOFTPLUS 6
#define HV_ELU 7
#define HV_SELU 8
#define HV_LEAKY_RELU 9
// config/model.rs LEAKY_RELU_SLOPE, SELU_ALPHA, SELU_LAMBDA.
#define HV_LEAKY_SLOPE 0.2f
#define HV_SELU_ALPHA 1.6732632f
#define HV_SELU_LAMBDA 1.050701f
// Or'ed into hv_bias_act's act: the bias rounded to bf16 first (bf16 layer outputs, as
// cuBLAS's bf16 epilogue reads it; launch.rs BIAS_BF16).
#define HV_BIAS_BF16 16

// NVRTC compiles without system headers, so no INFINITY or NAN from <math.h>.
#define HV_NEG_INF __uint_as_float(0xff800000u)
#define HV_NAN __uint_as_float(0x7fc00000u)

__device__ __forceinline__ float hv_gelu(float x) {
    const float u = 0.7978846f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float hv_gelu_grad(float x) {
    const float u = 0.7978846f * (x + 0.044715f * x * x * x);
    const float t = tanhf(u);
    const float du = 0.7978846f * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// As device/cpu/loss.rs sigmoid: e^x / (1 + e^x) below 0, so neither side overflows.
__device__ __forceinline__ float hv_sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

__device__ __forceinline__ float hv_act(float x, int act) {
    switch (act) {
    case HV_RELU: return fmaxf(x, 0.0f);
    case HV_TANH: return tanhf(x);
    case HV_GELU: return hv_gelu(x);
    case HV_SILU: return x * hv_sigmoid(x);
    case HV_SIGMOID: return hv_sigmoid(x);
    case HV_SOFTPLUS: return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
    case HV_ELU: return x > 0.0f ? x : expm1f(x);
    case HV_SELU: return HV_SELU_LAMBDA * (x > 0.0f ? x : HV_SELU_ALPHA * expm1f(x));
    case HV_LEAKY_RELU: return x > 0.0f ? x : HV_LEAKY_SLOPE * x;
    default: return x;
    }
}

// act'(z) for the activations whose backward reads the pre-activation (all but identity,
// relu and tanh), in device/cpu/kernels.rs act_grad_z's order.
__device__ __forceinline__ float hv_act_grad_z(float x, int act) {
    switch (act) {
    case HV_GELU: return hv_gelu_grad(x);
    case HV_SILU: {
        const float s = hv_sigmoid(x);
        return s * (1.0f + x * (1.0f - s));
    }
    case HV_SIGMOID: {
        const float s = hv_sigmoid(x);
        return s * (1.0f - s);
    }
    case HV_SOFTPLUS: return hv_sigmoid(x);
    case HV_ELU: return x > 0.0f ? 1.0f : expf(x);
    case HV_SELU: return HV_SELU_LAMBDA * (x > 0.0f ? 1.0f : HV_SELU_ALPHA * expf(x));
    case HV_LEAKY_RELU: return x > 0.0f ? 1.0f : HV_LEAKY_SLOPE;
    default: return 1.0f;
    }
}

// bf16 rounding (nearest, ties to even; a NaN stays NaN), bit-exact with the `half` crate
// and the CPU's bf16.rs. Also what the kernels that keep a bf16 copy write beside a float32
// value: `low` (may be null) gets element i's rounding at index i (cuda/buf.rs, device/fresh.rs).
__device__ __forceinline__ unsigned short hv_f32_to_bf16(float f) {
    const unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x0040u);  // NaN stays NaN
    const unsigned int round_bit = 0x00008000u;
    unsigned int h = x >> 16;
    if ((x & round_bit) && (x & (3u * round_bit - 1u))) h += 1;
    return (unsigned short)h;
}

__device__ __forceinline__ float hv_bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }
#define HV_LOW(low, i, x) \
    if (low) (low)[i] = hv_f32_to_bf16(x)

// v[i] = value.
extern "C" __global__ void hv_fill(float* v, long long n, float value) {
    HV_GRID_STRIDE(i, n) { v[i] = value; }
}

// dst[r, :] = src[idx[r], :] over [rows, cols]: a batch gathered by index from a data set
// kept in device memory.
extern "C" __global__ void hv_gather_rows(float* dst, const float* src, const int* idx, long long rows, int cols) {
    HV_GRID_STRIDE(i, rows * cols) {
        const long long r = i / cols;
        dst[i] = src[(long long)idx[r] * cols + (i - r * cols)];
    }
}

// out[r, j] = act(out[r, j] + bias[j]) over [rows, cols]; the pre-activation to keep_z
// (may be null). With HV_BIAS_BF16 in act, bias[j] rounded to bf16 first.
extern "C" __global__ void hv_bias_act(float* out, const float* bias, float* keep_z, long long rows, int cols,
                                       int act, unsigned short* low) {
    const bool bias_bf16 = (act & HV_BIAS_BF16) != 0;
    act &= ~HV_BIAS_BF16;
    HV_GRID_STRIDE(i, rows * cols) {
        const float b = bias[i % cols];
        const float z = out[i] + (bias_bf16 ? hv_bf16_to_f32(hv_f32_to_bf16(b)) : b);
        if (keep_z) keep_z[i] = z;
        const float a = hv_act(z, act);
        out[i] = a;
        HV_LOW(low, i, a);
    }
}

// d[i] *= act'(.), from the activation's output a (relu, tanh) or its input z (the others; z
// may be null for identity, relu and tanh).
extern "C" __global__ void hv_act_backward(float* d, const float* a, const float* z, long long n, int act,
                                           unsigned short* low) {
    HV_GRID_STRIDE(i, n) {
        switch (act) {
        case HV_RELU:
            if (a[i] <= 0.0f) d[i] = 0.0f;
            break;
        case HV_TANH: d[i] *= 1.0f - a[i] * a[i]; break;
        case HV_IDENTITY: break;
        default: d[i] *= hv_act_grad_z(z[i], act); break;
        }
        HV_LOW(low, i, d[i]);
    }
}

// Softmax cross-entropy, one thread per row of logits [rows, k]: row_loss[r] = the row's
// loss, row_correct[r] = 1 when the (first) argmax is the label; the gradient × grad_scale
// into d (may be null). With class weights cw [k] (may be null: all 1) the row's loss and
// gradient are × cw[label] (device/cpu/loss.rs `softmax_xent`). A label outside [0, k) gives a
// NaN loss (the step reports it).
extern "C" __global__ void hv_softmax_xent(const float* logits, const int* labels, const float* cw, long long rows,
                                           int k, float grad_scale, float* d, float* row_loss, int* row_correct) {
    HV_GRID_STRIDE(r, rows) {
        const float* row = logits + r * k;
        const int y = labels[r];
        int amax = 0;
        float mx = HV_NEG_INF;
        for (int j = 0; j < k; ++j) {
            if (row[j] > mx) {
                mx = row[j];
                amax = j;
            }
        }
        float sum = 0.0f;
        for (int j = 0; j < k; ++j) sum += expf(row[j] - mx);
        if (y < 0 || y >= k) {
            row_loss[r] = HV_NAN;
            row_correct[r] = 0;
            continue;
        }
        const float w = cw ? cw[y] : 1.0f;
        row_loss[r] = w * (logf(sum) - (row[y] - mx));
        row_correct[r] = amax == y ? 1 : 0;
        if (d) {
            const float inv = 1.0f / sum;
            const float scale = grad_scale * w;
            float* drow = d + r * k;
            for (int j = 0; j < k; ++j) {
                const float p = expf(row[j] - mx) * inv;
                drow[j] = scale * (p - (j == y ? 1.0f : 0.0f));
            }
        }
    }
}

// Softmax cross-entropy with label smoothing eps > 0 (`model.label_smoothing`), one thread per
// row: the target is (1 - eps)·one-hot + eps/k, row_loss[r] = w·((1 - eps)·(-log p_y) +
// eps·mean_j(-log p_j)) and d = grad_scale·w·(p - target); otherwise as hv_softmax_xent, which
// runs instead when eps is 0 (device/cpu/loss.rs `softmax_xent` computes the same). Its first
// half repeats hv_softmax_xent's on purpose: the default kernel stays as the last GPU run
// checked it (issue #48) until a GPU has run this one.
extern "C" __global__ void hv_softmax_xent_smooth(const float* logits, const int* labels, const float* cw,
                                                  long long rows, int k, float eps, float grad_scale, float* d,
                                                  float* row_loss, int* row_correct) {
    HV_GRID_STRIDE(r, rows) {
        const float* row = logits + r * k;
        const int y = labels[r];
        int amax = 0;
        float mx = HV_NEG_INF;
        for (int j = 0; j < k; ++j) {
            if (row[j] > mx) {
                mx = row[j];
                amax = j;
            }
        }
        float sum = 0.0f;
        for (int j = 0; j < k; ++j) sum += expf(row[j] - mx);
        if (y < 0 || y >= k) {
            row_loss[r] = HV_NAN;
            row_correct[r] = 0;
            continue;
        }
        float zs = 0.0f;
        for (int j = 0; j < k; ++j) zs += row[j] - mx;
        const float w = cw ? cw[y] : 1.0f;
        const float log_sum = logf(sum);
        const float nll = log_sum - (row[y] - mx);
        row_loss[r] = w * ((1.0f - eps) * nll + eps * (log_sum - zs / (float)k));
        row_correct[r] = amax == y ? 1 : 0;
        if (d) {
            const float inv = 1.0f / sum;
            const float scale = grad_scale * w;
            const float rest = eps / (float)k;
            const float hit = 1.0f - eps + rest;
            float* drow = d + r * k;
            for (int j = 0; j < k; ++j) {
                const float p = expf(row[j] - mx) * inv;
                drow[j] = scale * (p - (j == y ? hit : rest));
            }
        }
    }
}

// Sample weights (`data.sample_weight`, Keras' `sample_weight`), applied after a loss kernel,
// one thread per row: row_loss[r] *= rw[r] and, when d is given, d[r, :] *= rw[r] (the CPU
// reference, device/cpu/loss.rs, multiplies the finished row loss and gradient the same way).
extern "C" __global__ void hv_weigh_rows(float* row_loss, float* d, const float* rw, long long rows, int k) {
    HV_GRID_STRIDE(r, rows) {
        const float w = rw[r];
        row_loss[r] *= w;
        if (d) {
            float* drow = d + r * k;
            for (int j = 0; j < k; ++j) drow[j] *= w;
        }
    }
}

// Element-wise losses, one thread per row of [rows, k] (device/backend.rs `Pointwise`; the CPU
// reference is device/cpu/loss.rs `pointwise_loss`): mode 0 squared error, 1 absolute error, 2 Huber
// with delta, 3 binary cross-entropy of logits against 0/1 targets. row_loss[r] = mean over the
// row; row_correct[r] = elements with (p > 0) == (t > 0.5) (mode 3; else 0); d (may be null) =
// grad_scale / k · dloss/dp.
__device__ float hv_pointwise_value(int mode, float delta, float p, float t) {
    const float e = p - t;
    switch (mode) {
        case 0: return e * e;
        case 1: return fabsf(e);
        case 2: {
            const float a = fabsf(e);
            return a <= delta ? 0.5f * e * e : delta * (a - 0.5f * delta);
        }
        default: return fmaxf(p, 0.0f) - p * t + log1pf(expf(-fabsf(p)));
    }
}

__device__ float hv_pointwise_grad(int mode, float delta, float p, float t) {
    const float e = p - t;
    switch (mode) {
        case 0: return 2.0f * e;
        case 1: return e > 0.0f ? 1.0f : (e < 0.0f ? -1.0f : 0.0f);
        case 2: return fminf(fmaxf(e, -delta), delta);
        default: {
            if (p >= 0.0f) return 1.0f / (1.0f + expf(-p)) - t;
            const float x = expf(p);
            return x / (1.0f + x) - t;
        }
    }
}

extern "C" __global__ void hv_pointwise_loss(const float* pred, const float* target, long long rows, int k, int mode,
                                             float delta, float grad_scale, float* d, float* row_loss,
                                             int* row_correct) {
    HV_GRID_STRIDE(r, rows) {
        const float s = grad_scale / (float)k;
        float acc = 0.0f;
        int correct = 0;
        for (int j = 0; j < k; ++j) {
            const float p = pred[r * k + j], t = target[r * k + j];
            acc += hv_pointwise_value(mode, delta, p, t);
            correct += (p > 0.0f) == (t > 0.5f) ? 1 : 0;
            if (d) d[r * k + j] = s * hv_pointwise_grad(mode, delta, p, t);
        }
        row_loss[r] = acc / (float)k;
        row_correct[r] = mode == 3 ? correct : 0;
    }
}

// The regression losses added without a GPU, in a kernel of their own so that hv_pointwise_loss
// stays as the last GPU run checked it (issue #48): the same signature and rows as
// hv_pointwise_loss, mode 4 log-cosh, 5 absolute percentage error, 6 squared logarithmic error
// (Keras' floor 1e-7 on both arguments), 7 the pinball loss of quantile delta. The CPU reference
// is device/cpu/loss.rs `pointwise_loss`; row_correct is 0.
__device__ float hv_regression_value(int mode, float tau, float p, float t) {
    const float e = p - t;
    switch (mode) {
        case 4: {
            const float a = fabsf(e);
            return a + log1pf(expf(-2.0f * a)) - 0.69314718f;
        }
        case 5: return 100.0f * fabsf(e) / fmaxf(fabsf(t), 1e-7f);
        case 6: {
            const float d = logf(fmaxf(p, 1e-7f) + 1.0f) - logf(fmaxf(t, 1e-7f) + 1.0f);
            return d * d;
        }
        default: return fmaxf(tau * -e, (tau - 1.0f) * -e);
    }
}

__device__ float hv_regression_grad(int mode, float tau, float p, float t) {
    const float e = p - t;
    switch (mode) {
        case 4: return tanhf(e);
        case 5: return (e > 0.0f ? 100.0f : (e < 0.0f ? -100.0f : 0.0f)) / fmaxf(fabsf(t), 1e-7f);
        case 6:
            return p > 1e-7f ? 2.0f * (logf(p + 1.0f) - logf(fmaxf(t, 1e-7f) + 1.0f)) / (p + 1.0f) : 0.0f;
        default: return e < 0.0f ? -tau : (e > 0.0f ? 1.0f - tau : 0.0f);
    }
}

extern "C" __global__ void hv_regression_loss(const float* pred, const float* target, long long rows, int k, int mode,
                                              float tau, float grad_scale, float* d, float* row_loss,
                                              int* row_correct) {
    HV_GRID_STRIDE(r, rows) {
        const float s = grad_scale / (float)k;
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) {
            const float p = pred[r * k + j], t = target[r * k + j];
            acc += hv_regression_value(mode, tau, p, t);
            if (d) d[r * k + j] = s * hv_regression_grad(mode, tau, p, t);
        }
        row_loss[r] = acc / (float)k;
        row_correct[r] = 0;
    }
}

// Binary cross-entropy against label-smoothed targets t·(1 − eps) + eps/2 (`model.label_smoothing`
// with binary_cross_entropy), one thread per row: hv_pointwise_loss's mode 3 on the smoothed
// target, row_correct against t as stored. Launched instead of it only when eps > 0, so that the
// default kernel stays as the last GPU run checked it (issue #48); device/cpu/loss.rs computes
// the same.
extern "C" __global__ void hv_binary_xent_smooth(const float* pred, const float* target, long long rows, int k,
                                                 float eps, float grad_scale, float* d, float* row_loss,
                                                 int* row_correct) {
    HV_GRID_STRIDE(r, rows) {
        const float s = grad_scale / (float)k;
        float acc = 0.0f;
        int correct = 0;
        for (int j = 0; j < k; ++j) {
            const float p = pred[r * k + j], t = target[r * k + j];
            const float ts = t * (1.0f - eps) + 0.5f * eps;
            acc += hv_pointwise_value(3, 0.0f, p, ts);
            correct += (p > 0.0f) == (t > 0.5f) ? 1 : 0;
            if (d) d[r * k + j] = s * hv_pointwise_grad(3, 0.0f, p, ts);
        }
        row_loss[r] = acc / (float)k;
        row_correct[r] = correct;
    }
}

// Dropout on [rows, cols] in place (device/backend.rs `Mask`, `mask_bits`; CPU reference
// device/cpu/mod.rs `dropout`): element (r, c) is kept when the 24 bits of SplitMix64's finalizer of
// salt ^ (keys[r] | (col0 + c) << 32) are >= threshold (threshold 0 keeps all); kept ones are
// multiplied by scale, dropped ones set to 0.
__device__ unsigned long long hv_mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

extern "C" __global__ void hv_dropout(float* v, long long rows, int cols, const int* keys, unsigned long long salt,
                                      unsigned int col0, unsigned int threshold, float scale) {
    HV_GRID_STRIDE(i, rows * cols) {
        const long long r = i / cols;
        const unsigned int c = col0 + (unsigned int)(i % cols);
        const unsigned long long key = (unsigned long long)(unsigned int)keys[r] | ((unsigned long long)c << 32);
        const unsigned int bits = (unsigned int)(hv_mix64(salt ^ key) >> 40);
        v[i] = (threshold == 0 || bits >= threshold) ? v[i] * scale : 0.0f;
    }
}

// Row-wise softmax of [rows, k] in place, one thread per row.
extern "C" __global__ void hv_softmax_rows(float* v, long long rows, int k) {
    HV_GRID_STRIDE(r, rows) {
        float* row = v + r * k;
        float mx = HV_NEG_INF;
        for (int j = 0; j < k; ++j) mx = fmaxf(mx, row[j]);
        float sum = 0.0f;
        for (int j = 0; j < k; ++j) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        for (int j = 0; j < k; ++j) row[j] /= sum;
    }
}

// SGD: g' = g · grad_scale + wd · p; without momentum (m null) p -= lr · g'; with it
// m = mu · m + g' and p -= lr · (nesterov ? g' + mu · m : m).
// One SGD update of element i; hv_sgd and hv_sgd_seg both call it, so they give the same bits.
__device__ __forceinline__ void hv_sgd_at(float* p, const float* g, float* m, long long i, float lr, float grad_scale,
                                          float wd, float mu, int nesterov) {
    const float gi = g[i] * grad_scale + wd * p[i];
    if (!m) {
        p[i] -= lr * gi;
    } else {
        const float mi = mu * m[i] + gi;
        m[i] = mi;
        p[i] -= lr * (nesterov ? gi + mu * mi : mi);
    }
}

extern "C" __global__ void hv_sgd(float* p, const float* g, float* m, long long n, float lr, float grad_scale,
                                  float wd, float mu, int nesterov, unsigned short* low) {
    HV_GRID_STRIDE(i, n) {
        hv_sgd_at(p, g, m, i, lr, grad_scale, wd, mu, nesterov);
        HV_LOW(low, i, p[i]);
    }
}

// Adam (l2: L2 penalty in the gradient) or AdamW (decay = lr · weight_decay, decoupled);
// bc1 = 1 - beta1^t, bc2_sqrt = sqrt(1 - beta2^t).
// One Adam update of element i (step = lr / bc1); hv_adam and hv_adam_seg both call it.
__device__ __forceinline__ void hv_adam_at(float* p, const float* g, float* m, float* v, long long i, float step,
                                           float grad_scale, float b1, float b2, float eps, float bc2_sqrt, float l2,
                                           float decay) {
    const float pi = p[i];
    const float gi = g[i] * grad_scale + l2 * pi;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - (step * mi / (sqrtf(vi) / bc2_sqrt + eps) + decay * pi);
}

extern "C" __global__ void hv_adam(float* p, const float* g, float* m, float* v, long long n, float lr,
                                   float grad_scale, float b1, float b2, float eps, float bc1, float bc2_sqrt,
                                   float l2, float decay, unsigned short* low) {
    const float step = lr / bc1;
    HV_GRID_STRIDE(i, n) {
        hv_adam_at(p, g, m, v, i, step, grad_scale, b1, b2, eps, bc2_sqrt, l2, decay);
        HV_LOW(low, i, p[i]);
    }
}

// ---- The fused update of a gradient bucket: its consecutive tensors in one launch. Segment
// k covers [end[k-1], end[k]) of the range (end[-1] = 0) and takes the weight decay when
// decayed[k] (a weight; biases take none). Each element computes what hv_sgd / hv_adam
// compute for its tensor alone, so the two paths give the same bits. ----

#define HV_MAX_SEGS 32
struct hv_segs {
    long long end[HV_MAX_SEGS];
    int decayed[HV_MAX_SEGS];
    int n;
};

__device__ __forceinline__ int hv_decayed(const hv_segs& s, long long i) {
    int lo = 0, hi = s.n - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (i < s.end[mid]) hi = mid;
        else lo = mid + 1;
    }
    return s.decayed[lo];
}

extern "C" __global__ void hv_sgd_seg(float* p, const float* g, float* m, long long n, hv_segs segs, float lr,
                                      float grad_scale, float wd, float mu, int nesterov, unsigned short* low) {
    HV_GRID_STRIDE(i, n) {
        hv_sgd_at(p, g, m, i, lr, grad_scale, hv_decayed(segs, i) ? wd : 0.0f, mu, nesterov);
        HV_LOW(low, i, p[i]);
    }
}

extern "C" __global__ void hv_adam_seg(float* p, const float* g, float* m, float* v, long long n, hv_segs segs,
                                       float lr, float grad_scale, float b1, float b2, float eps, float bc1,
                                       float bc2_sqrt, float l2, float decay, unsigned short* low) {
    const float step = lr / bc1;
    HV_GRID_STRIDE(i, n) {
        const int on = hv_decayed(segs, i);
        hv_adam_at(p, g, m, v, i, step, grad_scale, b1, b2, eps, bc2_sqrt, on ? l2 : 0.0f, on ? decay : 0.0f);
        HV_LOW(low, i, p[i]);
    }
}

// ---- fp16 / bf16 packing for compressed gradient exchange (bit-exact with the `half`
// crate that the CPU path uses: round to nearest, ties to even) ----


__device__ __forceinline__ unsigned short hv_f32_to_f16(float f) {
    const unsigned int x = __float_as_uint(f);
    const unsigned int sign = x & 0x80000000u, exp = x & 0x7f800000u, man = x & 0x007fffffu;
    const unsigned int hsign = sign >> 16;
    if (exp == 0x7f800000u) return (unsigned short)(hsign | 0x7c00u | (man ? 0x0200u : 0u) | (man >> 13));
    const int hexp = (int)(exp >> 23) - 127 + 15;
    if (hexp >= 0x1f) return (unsigned short)(hsign | 0x7c00u);  // overflow: infinity
    if (hexp <= 0) {                                              // subnormal or zero
        if (14 - hexp > 24) return (unsigned short)hsign;
        const unsigned int m = man | 0x00800000u;
        unsigned int hman = m >> (14 - hexp);
        const unsigned int round_bit = 1u << (13 - hexp);
        if ((m & round_bit) && (m & (3u * round_bit - 1u))) hman += 1;
        return (unsigned short)(hsign | hman);
    }
    unsigned int h = hsign | ((unsigned int)hexp << 10) | (man >> 13);
    const unsigned int round_bit = 0x00001000u;
    if ((man & round_bit) && (man & (3u * round_bit - 1u))) h += 1;
    return (unsigned short)h;
}

__device__ __forceinline__ float hv_f16_to_f32(unsigned short h) {
    const unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
    const unsigned int exp = h & 0x7c00u, man = h & 0x03ffu;
    if (exp == 0x7c00u) return __uint_as_float(sign | 0x7f800000u | (man ? 0x00400000u | (man << 13) : 0u));
    if (exp == 0) {  // zero or subnormal: man · 2^-24, exact in f32
        const float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return __uint_as_float(sign | (((exp >> 10) + 112u) << 23) | (man << 13));
}

extern "C" __global__ void hv_pack_f16(const float* x, unsigned short* out, long long n) {
    HV_GRID_STRIDE(i, n) { out[i] = hv_f32_to_f16(x[i]); }
}
extern "C" __global__ void hv_unpack_f16(const unsigned short* in, float* out, long long n) {
    HV_GRID_STRIDE(i, n) { out[i] = hv_f16_to_f32(in[i]); }
}
extern "C" __global__ void hv_pack_bf16(const float* x, unsigned short* out, long long n) {
    HV_GRID_STRIDE(i, n) { out[i] = hv_f32_to_bf16(x[i]); }
}
extern "C" __global__ void hv_unpack_bf16(const unsigned short* in, float* out, long long n) {
    HV_GRID_STRIDE(i, n) { out[i] = hv_bf16_to_f32(in[i]); }
}
// x[i] = x[i] rounded to bf16 (kept as float32): bf16 layer outputs (HVTRAIN_BF16_OUTPUTS)
// where no cublasLt bf16 epilogue writes them, as the CPU's bias_act does.
extern "C" __global__ void hv_round_bf16(float* x, long long n) {
    HV_GRID_STRIDE(i, n) { x[i] = hv_bf16_to_f32(hv_f32_to_bf16(x[i])); }
}

// Gradient clipping. Both split v[0, n) into `parts` interleaved sets: set p holds v[p],
// v[p + parts], v[p + 2·parts], … (consecutive threads read consecutive elements), and write
// one result per set, which the host adds (no block reduction: see the top of this file).

// partial[p] = Σ v[i]² over set p, in float64 (the CPU backend's sum, in another order).
extern "C" __global__ void hv_sum_squares(const float* v, long long n, double* partial, int parts) {
    HV_GRID_STRIDE(p, parts) {
        double s = 0.0;
        for (long long i = p; i < n; i += parts) {
            const double x = (double)v[i];
            s += x * x;
        }
        partial[p] = s;
    }
}

// v[i] clamped to [-bound, bound] (NaN stays NaN), as cpu.rs's clamp_host; changed[p]
// counts set p's clamped elements.
extern "C" __global__ void hv_clamp(float* v, long long n, float bound, int* changed, int parts) {
    HV_GRID_STRIDE(p, parts) {
        int k = 0;
        for (long long i = p; i < n; i += parts) {
            const float x = v[i];
            if (fabsf(x) > bound) {
                v[i] = copysignf(bound, x);
                k += 1;
            }
        }
        changed[p] = k;
    }
}

// Plain RNN (tanh / relu) time loop, forward and backward, over one pseudo-layer (math:
// fusedrnn/engines/simple_rnn.py, pointwise operations in its order).  An item of a phase
// (cells.h PhaseWalk) is a range of units.
#include "cells.h"
#include "activations.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

namespace {

// np.maximum(a, 0): NaN propagates.
template <class T>
inline T relu(T a) {
  return (a >= T(0) || a != a) ? a : T(0);
}

template <class T>
struct RnnForwardJob {
  const RnnForwardArgs<T>& a;
  PackedMatrix<T> rec;
  StridedMatrix<T> unpacked;  // R read where it lies (reads_unpacked; data null: R is packed)
  const PerThread<T>* a_packs;  // each thread's packed GEMM left-hand side
  ChunkedProjection<T> input;   // x W + b (when x_gates is not given)
  PhaseQueue* queue;            // the work of the threads that take part

  // Phases: packing (R, W), then per step: the input projection of a chunk of steps (when it
  // starts one and x W is computed here), the GEMM slices and the activation.  An item is a
  // range of R's panels.
  void run(int p, int participants) {
    const int64_t T_ = a.steps, B = a.batch, H = a.units;
    const int64_t items = phase_items(rec.panels(), participants);
    T* work = a_packs->of(p);
    PhaseWalk walk(*queue, p);
    panel_phase(walk, rec, items, [&](const PanelRange& r, bool) {
      if (!unpacked.data) pack_panels(a.w_rec.data, a.w_rec.rs, a.w_rec.cs, rec, r.first, r.last);
      if (!a.x_gates && !input.unpacked.data)
        pack_panels(a.w_in.data, a.w_in.rs, a.w_in.cs, input.w, r.first, r.last);
    });
    for (int64_t t = 0; t < T_; ++t) {
      const T* h_prev_t = a.h + t * B * H;
      T* h_next_t = a.h + (t + 1) * B * H;
      const uint8_t* valid = a.valid ? a.valid + t * B : nullptr;
      const int64_t live = live_rows(valid, B);
      projection_phase(walk, input, t, T_, items, work);
      const T* xg_t = a.x_gates ? a.x_gates + t * B * H : input.at(t);
      panel_phase(walk, rec, items, [&](const PanelRange& r, bool first) {
        const int64_t u0 = r.begin, u1 = r.end, n = u1 - u0;
        step_product(live, h_prev_t, H, rec, unpacked, static_cast<const T*>(nullptr), r, first,
                     h_next_t, H, work);
        carry_rows(h_next_t, h_prev_t, live, B, H, u0, u1);  // ended sequences: state kept
        for (int64_t b = 0; b < live; ++b) {
          T* hn = h_next_t + b * H;
          const T* xg = xg_t + b * H;
          for (int64_t u = u0; u < u1; ++u) hn[u] += xg[u];
          if (a.relu) {
            for (int64_t u = u0; u < u1; ++u) hn[u] = relu(hn[u]);
          } else {
            tanh_array(hn + u0, hn + u0, n);
          }
          if (valid && !valid[b])
            for (int64_t u = u0; u < u1; ++u) hn[u] = h_prev_t[b * H + u];
        }
      });
    }
    if (p == 0) walk.wait_all();
  }
};

template <class T>
struct RnnBackwardJob {
  const RnnBackwardArgs<T>& a;
  PackedMatrix<T> rec_t;
  T* dh_prev;
  const PerThread<T>* a_packs;
  PhaseQueue* queue;  // the work of the threads that take part

  // Phases: packing Rᵀ, then per step t (from the last) one phase over ranges of units:
  // dh_t = dpre_{t+1} Rᵀ where step t + 1 is valid, the step's own dh, dpre_t; a last phase: dh_0.
  void run(int p, int participants) {
    const int64_t T_ = a.steps, B = a.batch, H = a.units;
    const int64_t items = phase_items(rec_t.panels(), participants);
    T* work = a_packs->of(p);
    PhaseWalk walk(*queue, p);
    panel_phase(walk, rec_t, items, [&](const PanelRange& r, bool) {
      pack_panels(a.w_rec.data, a.w_rec.cs, a.w_rec.rs, rec_t, r.first, r.last);
    });
    const auto recurrent = [&](int64_t t_next, const PanelRange& r, bool first) {
      const uint8_t* valid = a.valid ? a.valid + t_next * B : nullptr;
      const int64_t live = recurrent_gradient(a.d_pre + t_next * B * H, H, valid, B, rec_t, r,
                                              first, dh_prev, H, work);
      copy_valid_rows(a.dh, dh_prev, valid, live, H, r.begin, r.end);
    };
    for (int64_t t = T_ - 1; t >= 0; --t) {
      const uint8_t* valid = a.valid ? a.valid + t * B : nullptr;
      const int64_t live = live_rows(valid, B);
      panel_phase(walk, rec_t, items, [&](const PanelRange& r, bool first) {
        if (t < T_ - 1) recurrent(t + 1, r, first);
        const int64_t u0 = r.begin, u1 = r.end;
        zero_rows(a.d_pre + t * B * H, live, B, 1, H, u0, u1);  // ended sequences: dh kept
        for (int64_t b = 0; b < B; ++b) {
          T* dh = a.dh + b * H;
          add_columns(dh, a.dh_steps ? a.dh_steps + (t * B + b) * H : nullptr, u0, u1);
          if (b >= live) continue;
          const T* h = a.h + ((t + 1) * B + b) * H;
          T* da = a.d_pre + (t * B + b) * H;
          if (a.relu) {
            for (int64_t u = u0; u < u1; ++u) da[u] = dh[u] * (h[u] > T(0) ? T(1) : T(0));
          } else {
            for (int64_t u = u0; u < u1; ++u) da[u] = dh[u] * (T(1) - h[u] * h[u]);
          }
          if (valid) {
            const T v = valid[b] ? T(1) : T(0);
            for (int64_t u = u0; u < u1; ++u) da[u] *= v;
          }
        }
      });
    }
    if (T_ > 0)
      panel_phase(walk, rec_t, items, [&](const PanelRange& r, bool first) { recurrent(0, r, first); });
    if (p == 0) walk.wait_all();
  }
};

}  // namespace

template <class T>
void rnn_forward(const RnnForwardArgs<T>& a, int threads) {
  RnnForwardJob<T> job{a, {}, {}, nullptr, {}, nullptr};
  job.rec.rows = a.units; job.rec.columns = a.units;
  const UnpackedWeights<T> unpacked(a.steps, a.batch, a.w_rec, a.units, a.w_in, a.inputs,
                                    a.units, !a.x_gates);
  job.unpacked = unpacked.rec;
  Buffer<T> rec(job.unpacked.data ? 0 : job.rec.values());
  job.rec.data = rec.data;
  ProjectionBuffers<T> projection(job.input, job.rec, a.x_gates ? nullptr : a.x, a.inputs,
                                  a.steps, a.batch, a.bias, nullptr, a.valid, unpacked.in);
  const int64_t step_macs = a.batch * a.units * (a.units + (a.x_gates ? 0 : a.inputs));
  const int team = loop_team_size(threads, job.rec.panels(), step_macs, job.rec.bytes());
  PerThread<T> a_packs(team, loop_workspace_values<T>(a.batch, a.units, projection));
  job.a_packs = &a_packs;
  run_open_job(job, team);
}

template <class T>
void rnn_backward(const RnnBackwardArgs<T>& a, int threads) {
  RnnBackwardJob<T> job{a, {}, nullptr, nullptr, nullptr};
  job.rec_t.rows = a.units; job.rec_t.columns = a.units;
  Buffer<T> rec_t(job.rec_t.values()), dh_prev(size_t(a.batch * a.units));
  job.rec_t.data = rec_t.data;
  job.dh_prev = dh_prev.data;
  const int team = loop_team_size(threads, job.rec_t.panels(), a.batch * a.units * a.units,
                                  job.rec_t.bytes());
  PerThread<T> a_packs(team, gemm_workspace_values<T>(a.batch, a.units));
  job.a_packs = &a_packs;
  run_open_job(job, team);
}

template void rnn_forward<float>(const RnnForwardArgs<float>&, int);
template void rnn_forward<double>(const RnnForwardArgs<double>&, int);
template void rnn_backward<float>(const RnnBackwardArgs<float>&, int);
template void rnn_backward<double>(const RnnBackwardArgs<double>&, int);

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn

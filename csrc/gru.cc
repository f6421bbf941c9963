// GRU (cuDNN "linear before reset") time loop, forward and backward, over one pseudo-layer
// (math: fusedrnn/engines/gru.py; the pointwise operations are the NumPy engine's, in its
// order).  An item of a phase (cells.h PhaseWalk) is a range of units of all three gate groups;
// a forward loop, and a backward loop of enough rows, may run in batch slices instead (cells.h
// run_in_slices, backward_runs_in_slices).
#include "cells.h"
#include "activations.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

namespace {

template <class T>
struct GruForwardJob {
  const GruForwardArgs<T>& a;
  PackedMatrix<T> rec;  // R: K = H, groups r, u, h' of H columns
  StridedMatrix<T> unpacked;  // R read where it lies (reads_unpacked; data null: R is packed)
  T* q;                 // [B, 3H] h_{t-1} R + bR
  const PerThread<T>* a_packs;  // each thread's packed GEMM left-hand side
  ChunkedProjection<T> input;   // x W + bW (when x_gates is not given)
  PhaseQueue* queue;            // the work of the threads that take part
  int64_t S;                    // rows between two steps of x, x_gates, h and the trace

  // Phases: packing (R, W), then per step: the input projection of a chunk of steps (when it
  // starts one and x W is computed here), the GEMM slices and gate math.  An item is a range of
  // R's panels.
  void run(int p, int participants) {
    const int64_t T_ = a.steps, B = a.batch, H = a.units, G = 3 * H;
    const int64_t items = phase_items(rec.panels(), participants);
    T* work = a_packs->of(p);
    const T half = T(0.5);
    PhaseWalk walk(*queue, p);
    panel_phase(walk, rec, items, [&](const PanelRange& r, bool) {
      if (!unpacked.data) pack_panels(a.w_rec.data, a.w_rec.rs, a.w_rec.cs, rec, r.first, r.last);
      if (!a.x_gates && !input.unpacked.data)
        pack_panels(a.w_in.data, a.w_in.rs, a.w_in.cs, input.w, r.first, r.last);
    });
    for (int64_t t = 0; t < T_; ++t) {
      const T* h_prev_t = a.h + t * S * H;
      T* h_next_t = a.h + (t + 1) * S * H;
      const uint8_t* valid = a.valid ? a.valid + t * S : nullptr;
      const int64_t live = live_rows(valid, B);
      projection_phase(walk, input, t, T_, items, work);
      const T* xg_t = a.x_gates ? a.x_gates + t * S * G : input.at(t);
      panel_phase(walk, rec, items, [&](const PanelRange& r, bool first) {
        const int64_t u0 = r.begin, u1 = r.end, n = u1 - u0;
        step_product(live, h_prev_t, H, rec, unpacked, static_cast<const T*>(nullptr), r, first, q,
                     G, work);
        carry_rows(h_next_t, h_prev_t, live, B, H, u0, u1);  // ended sequences: state kept, trace rows zero
        const int64_t trace_t = a.keep_trace ? t : 0;
        zero_rows(a.gates + trace_t * S * G, live, B, 3, H, u0, u1);
        zero_rows(a.q_h + trace_t * S * H, live, B, 1, H, u0, u1);
        for (int64_t b = 0; b < live; ++b) {
          T* qb = q + b * G;
          const T* xg = xg_t + b * G;
          T* g = a.gates + (trace_t * S + b) * G;
          T* qh = a.q_h + (trace_t * S + b) * H;
          const T* hp = h_prev_t + b * H;
          T* hn = h_next_t + b * H;
          for (int k = 0; k < 3; ++k)
            for (int64_t u = u0; u < u1; ++u) qb[k * H + u] += a.b_rec[k * H + u];
          for (int k = 0; k < 2; ++k) {
            T* gk = g + k * H;
            for (int64_t u = u0; u < u1; ++u) gk[u] = (xg[k * H + u] + qb[k * H + u]) * half;
            tanh_array(gk + u0, gk + u0, n);
            for (int64_t u = u0; u < u1; ++u) gk[u] = (gk[u] + T(1)) * half;
          }
          T* gn = g + 2 * H;
          for (int64_t u = u0; u < u1; ++u) {
            qh[u] = qb[2 * H + u];
            T v = g[u] * qb[2 * H + u];
            gn[u] = v + xg[2 * H + u];
          }
          tanh_array(gn + u0, gn + u0, n);
          const T* gu = g + H;
          for (int64_t u = u0; u < u1; ++u) {
            T v = hp[u] - gn[u];
            v *= gu[u];
            hn[u] = v + gn[u];
          }
          if (valid && !valid[b])
            for (int64_t u = u0; u < u1; ++u) hn[u] = hp[u];
        }
      });
    }
    if (p == 0) walk.wait_all();
  }
};

template <class T>
struct GruBackwardJob {
  const GruBackwardArgs<T>& a;
  PackedMatrix<T> rec_t;  // Rᵀ: K = 3H, N = H
  T* dh_prev;             // [B, H]
  const PerThread<T>* a_packs;
  PhaseQueue* queue;      // the work of the threads that take part

  // Phases: packing Rᵀ, then per step t (from the last) one phase over ranges of units:
  // dh_t = dG_{t+1} Rᵀ + dh_{t+1} ⊙ u_{t+1} where step t + 1 is valid, the step's own dh, the
  // gate gradients; a last phase: dh_0.
  void run(int p, int participants) {
    const int64_t T_ = a.steps, B = a.batch, H = a.units, G = 3 * H;
    const int64_t S = step_rows(a);
    const int64_t items = phase_items(rec_t.panels(), participants);
    T* work = a_packs->of(p);
    PhaseWalk walk(*queue, p);
    panel_phase(walk, rec_t, items, [&](const PanelRange& r, bool) {
      pack_panels(a.w_rec.data, a.w_rec.cs, a.w_rec.rs, rec_t, r.first, r.last);
    });
    const auto recurrent = [&](int64_t t_next, const PanelRange& r, bool first) {
      const int64_t u0 = r.begin, u1 = r.end;
      const uint8_t* valid = a.valid ? a.valid + t_next * S : nullptr;
      const int64_t live = recurrent_gradient(a.d_q + t_next * S * G, G, valid, B, rec_t, r, first,
                                              dh_prev, H, work);
      for (int64_t b = 0; b < live; ++b) {
        const T* ug = a.gates + (t_next * S + b) * G + H;
        T* dh = a.dh + b * H;
        const T* dp = dh_prev + b * H;
        if (valid && !valid[b]) continue;
        for (int64_t u = u0; u < u1; ++u) dh[u] = dp[u] + dh[u] * ug[u];
      }
    };
    for (int64_t t = T_ - 1; t >= 0; --t) {
      const uint8_t* valid = a.valid ? a.valid + t * S : nullptr;
      const int64_t live = live_rows(valid, B);
      panel_phase(walk, rec_t, items, [&](const PanelRange& r, bool first) {
        if (t < T_ - 1) recurrent(t + 1, r, first);
        const int64_t u0 = r.begin, u1 = r.end;
        zero_rows(a.d_a + t * S * G, live, B, 3, H, u0, u1);  // ended sequences: dh kept
        zero_rows(a.d_q + t * S * G, live, B, 3, H, u0, u1);
        for (int64_t b = 0; b < B; ++b) {
          T* dh = a.dh + b * H;
          add_columns(dh, a.dh_steps ? a.dh_steps + (t * S + b) * H : nullptr, u0, u1);
          if (b >= live) continue;
          const T* g = a.gates + (t * S + b) * G;
          const T *r = g, *ug = g + H, *n = g + 2 * H;
          const T* qh = a.q_h + (t * S + b) * H;
          const T* hp = a.h + (t * S + b) * H;
          T* da = a.d_a + (t * S + b) * G;
          T* dq = a.d_q + (t * S + b) * G;
          const bool has_mask = valid != nullptr;
          const T v = (!valid || valid[b]) ? T(1) : T(0);
          for (int64_t u = u0; u < u1; ++u) {
            const T d_n = dh[u] * ((T(1) - ug[u]) * (T(1) - n[u] * n[u]));
            const T d_u = dh[u] * (((hp[u] - n[u]) * ug[u]) * (T(1) - ug[u]));
            const T d_r = d_n * ((qh[u] * r[u]) * (T(1) - r[u]));
            const T dq_h = d_n * r[u];
            if (has_mask) {
              da[u] = d_r * v; da[H + u] = d_u * v; da[2 * H + u] = d_n * v;
              dq[u] = d_r * v; dq[H + u] = d_u * v; dq[2 * H + u] = dq_h * v;
            } else {
              da[u] = d_r; da[H + u] = d_u; da[2 * H + u] = d_n;
              dq[u] = d_r; dq[H + u] = d_u; dq[2 * H + u] = dq_h;
            }
          }
        }
      });
    }
    if (T_ > 0)
      panel_phase(walk, rec_t, items, [&](const PanelRange& r, bool first) { recurrent(0, r, first); });
    if (p == 0) walk.wait_all();
  }
};

// The backward args of rows [b0, b1) of a's batch (a batch slice: run_in_slices).
template <class T>
GruBackwardArgs<T> backward_rows(const GruBackwardArgs<T>& a, int64_t b0, int64_t b1) {
  const int64_t H = a.units;
  GruBackwardArgs<T> slice = a;
  slice.batch = b1 - b0;
  slice.step_rows = step_rows(a);
  slice.gates = a.gates + b0 * 3 * H;
  slice.q_h = a.q_h + b0 * H;
  slice.h = a.h + b0 * H;
  slice.dh_steps = a.dh_steps ? a.dh_steps + b0 * H : nullptr;
  slice.d_a = a.d_a + b0 * 3 * H;
  slice.d_q = a.d_q + b0 * 3 * H;
  slice.dh = a.dh + b0 * H;
  slice.valid = a.valid ? a.valid + b0 : nullptr;
  return slice;
}

}  // namespace

template <class T>
void gru_forward(const GruForwardArgs<T>& a, int threads) {
  if (runs_in_slices(threads, a.steps, a.batch, a.units, packed_bytes<T>(a.units, a.units, 3))) {
    run_in_slices(a, threads, gru_forward<T>, [](const GruForwardArgs<T>& a, int64_t b0, int64_t b1) {
      GruForwardArgs<T> slice = slice_rows(a, b0, b1, 3 * a.units, a.units);
      slice.gates = a.gates + b0 * 3 * a.units;
      slice.q_h = a.q_h + b0 * a.units;
      return slice;
    });
    return;
  }
  GruForwardJob<T> job{a, {}, {}, nullptr, nullptr, {}, nullptr, step_rows(a)};
  job.rec.rows = a.units; job.rec.columns = a.units; job.rec.groups = 3;
  const UnpackedWeights<T> unpacked(a.steps, step_rows(a), a.w_rec, a.units, a.w_in, a.inputs,
                                    3 * a.units, !a.x_gates);
  job.unpacked = unpacked.rec;
  Buffer<T> rec(job.unpacked.data ? 0 : job.rec.values()), q(size_t(a.batch * 3 * a.units));
  job.rec.data = rec.data;
  job.q = q.data;
  ProjectionBuffers<T> projection(job.input, job.rec, a.x_gates ? nullptr : a.x, a.inputs,
                                  a.steps, a.batch, a.bias_in, nullptr, a.valid, unpacked.in,
                                  job.S);
  const int64_t step_macs = a.batch * 3 * a.units * (a.units + (a.x_gates ? 0 : a.inputs));
  const int team = loop_team_size(threads, job.rec.panels(), step_macs, job.rec.bytes());
  PerThread<T> a_packs(team, loop_workspace_values<T>(a.batch, a.units, projection));
  job.a_packs = &a_packs;
  run_open_job(job, team);
}

template <class T>
void gru_backward(const GruBackwardArgs<T>& a, int threads) {
  GruBackwardJob<T> job{a, {}, nullptr, nullptr, nullptr};
  job.rec_t.rows = 3 * a.units; job.rec_t.columns = a.units;
  const int64_t step_macs = a.batch * 3 * a.units * a.units;
  if (backward_runs_in_slices(threads, a.batch, step_macs, job.rec_t.bytes())) {
    run_in_slices(a, threads, gru_backward<T>, backward_rows<T>);
    return;
  }
  Buffer<T> rec_t(job.rec_t.values()), dh_prev(size_t(a.batch * a.units));
  job.rec_t.data = rec_t.data;
  job.dh_prev = dh_prev.data;
  const int team = loop_team_size(threads, job.rec_t.panels(), step_macs, job.rec_t.bytes());
  PerThread<T> a_packs(team, gemm_workspace_values<T>(a.batch, 3 * a.units));
  job.a_packs = &a_packs;
  run_open_job(job, team);
}

template void gru_forward<float>(const GruForwardArgs<float>&, int);
template void gru_forward<double>(const GruForwardArgs<double>&, int);
template void gru_backward<float>(const GruBackwardArgs<float>&, int);
template void gru_backward<double>(const GruBackwardArgs<double>&, int);

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn

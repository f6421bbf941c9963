// LSTM time loop, forward and backward, over one pseudo-layer (math: fusedrnn/engines/lstm.py;
// every pointwise operation below is the NumPy engine's, in the same order, so that only the
// recurrent GEMM's summation order and tanh's last bits differ from it).
//
// Work split: open jobs (cells.h PhaseWalk): each phase's items are ranges of hidden units
// (whole panels of R's gate groups, so the four gate columns of a unit are computed together)
// or, with a projection, of emitted columns; with a full team each thread keeps its own share of
// them for the whole sequence.  Per step: forward = GEMM slices + gate math (+ a projection
// phase); backward = dh_t slices = dG_{t+1} Rᵀ with the gate gradients (with a projection: the
// dh slices, then dm = dh W_Pᵀ slices with the gate gradients).  A forward loop of few units
// and many rows, and a backward loop of enough rows, run in batch slices instead (cells.h
// run_in_slices, backward_runs_in_slices).
#include "cells.h"
#include "activations.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

namespace {

template <class T>
struct LstmForwardJob {
  const LstmForwardArgs<T>& a;
  PackedMatrix<T> rec, proj;  // R: K = P, groups i, f, c, o of H columns; W_P: K = H, N = P
  StridedMatrix<T> unpacked;  // R read where it lies (reads_unpacked; data null: R is packed)
  T* m;                       // [B, H] o ⊙ tanh(c) before the projection
  const PerThread<T>* a_packs;  // each thread's packed GEMM left-hand side
  ChunkedProjection<T> input;   // x W (when x_gates is not given)
  PhaseQueue* queue;            // the work of the threads that take part
  int64_t S;                    // rows between two steps of x, x_gates, h and the trace (a.step_rows)
  // Where the steps are recorded: the caller's trace, or (keep_trace = false) one-step buffers of
  // the engine's own, 64-byte aligned so that the two threads' units never share a cache line
  // (NumPy's arrays are not: rewriting the same lines every step made them ping-pong).
  T *gates, *co, *c;

  // One batch row's gate math for units [u0, u1), a vector of units at a time, every lane the
  // same IEEE operations in the NumPy engine's order: from g (the recurrent GEMM's output) the
  // activations i, f, c', o go to act[0..3] (g's own gate blocks, or the trace's gate planes);
  // c_next, co = tanh(c_next) and out = o ⊙ co are written.
  void gate_math(const T* g, const T* xg, const T* cp, T* cn, T* co, T* out, T* const act[4],
                 int64_t u0, int64_t u1) const {
    constexpr int W = Vec<T>::width;
    const int64_t H = a.units;
    const T* peep = a.peep;
    const T clip = a.cell_clip;
    const V<T> one = splat<T>(T(1)), half = splat<T>(T(0.5));
    const V<T> hi = splat<T>(clip), lo = splat<T>(-clip);
    for (int64_t u = u0; u < u1; u += W) {
      const int64_t n = u1 - u < W ? u1 - u : W;
      V<T> gi = load_n(g + u, n) + load_n(xg + u, n);
      V<T> gf = load_n(g + H + u, n) + load_n(xg + H + u, n);
      V<T> gc = load_n(g + 2 * H + u, n) + load_n(xg + 2 * H + u, n);
      V<T> go = load_n(g + 3 * H + u, n) + load_n(xg + 3 * H + u, n);
      const V<T> c_prev = load_n(cp + u, n);
      if (peep) {
        gi += c_prev * load_n(peep + u, n);
        gf += c_prev * load_n(peep + H + u, n);
      }
      gi = tanh_vec<T>(gi);
      gf = tanh_vec<T>(gf);
      gc = tanh_vec<T>(gc);
      if (!peep) go = tanh_vec<T>(go);
      gi = (gi + one) * half;
      gf = (gf + one) * half;
      V<T> c = gf * c_prev;
      c += gi * gc;
      if (clip > 0) {
        c = c < lo ? lo : c;
        c = c > hi ? hi : c;
      }
      store_n(act[0] + u, gi, n);
      store_n(act[1] + u, gf, n);
      store_n(act[2] + u, gc, n);
      store_n(act[3] + u, go, n);
      store_n(cn + u, c, n);
    }
    // Second pass (each pass's iterations are independent, so the out-of-order core overlaps
    // their tanh chains): o and tanh(c), which need c.
    for (int64_t u = u0; u < u1; u += W) {
      const int64_t n = u1 - u < W ? u1 - u : W;
      const V<T> c = load_n(cn + u, n);
      V<T> go = load_n(act[3] + u, n);
      if (peep) go = tanh_vec<T>(go + c * load_n(peep + 2 * H + u, n));
      go = (go + one) * half;
      const V<T> c_out = tanh_vec<T>(c);
      store_n(act[3] + u, go, n);
      store_n(co + u, c_out, n);
      store_n(out + u, go * c_out, n);
    }
  }

  // Phases: packing (R, W, W_P), then per step: the input projection of a chunk of steps
  // (when it starts one and x W is computed here), the GEMM slices and gate math, the
  // projection (W_P).  An item is a range of R's panels (of W_P's in the projection phase).
  void run(int p, int participants) {
    const int64_t T_ = a.steps, B = a.batch, H = a.units, P = a.out_units, G = 4 * H;
    const int64_t units_items = phase_items(rec.panels(), participants);
    const int64_t proj_items = a.w_proj ? phase_items(proj.panels(), participants) : 0;
    const int64_t c_slots = a.keep_trace ? T_ + 1 : 2, step_slots = a.keep_trace ? T_ : 1;
    const int64_t slot_rows = a.keep_trace ? S : B;  // the caller's trace, or the own buffers
    T* const* planes = a.keep_trace && a.gate_planes[0] ? a.gate_planes : nullptr;
    // the gates' GEMM output (and, interleaved, their activations): in the trace, or (planes)
    // one step's buffer
    const int64_t gate_slots = planes ? 1 : step_slots, gate_rows = planes ? B : slot_rows;
    T* work = a_packs->of(p);
    PhaseWalk walk(*queue, p);
    walk.run(units_items + proj_items, [&](int64_t item, bool) {
      if (item >= units_items) {
        const PanelRange r = panel_range(proj, item - units_items, proj_items);
        pack_panels(a.w_proj, P, 1, proj, r.first, r.last);
        return;
      }
      const PanelRange r = panel_range(rec, item, units_items);
      if (!unpacked.data)
        pack_panels(a.w_rec.data, a.w_rec.rs, a.w_rec.cs, rec, r.first, r.last, a.gate_scale,
                    a.gate_blocks);
      if (!a.x_gates && !input.unpacked.data)
        pack_panels(a.w_in.data, a.w_in.rs, a.w_in.cs, input.w, r.first, r.last,
                    static_cast<const T*>(nullptr), a.gate_blocks);
    });
    for (int64_t t = 0; t < T_; ++t) {
      const T* h_prev = a.h + t * S * P;
      T* h_next = a.h + (t + 1) * S * P;
      const T* c_prev_t = c + (t % c_slots) * slot_rows * H;
      T* c_next_t = c + ((t + 1) % c_slots) * slot_rows * H;
      T* g_t = gates + (t % gate_slots) * gate_rows * G;
      T* co_t = co + (t % step_slots) * slot_rows * H;
      const uint8_t* valid = a.valid ? a.valid + t * S : nullptr;
      const int64_t live = live_rows(valid, B);
      projection_phase(walk, input, t, T_, units_items, work);
      const T* xg_t = a.x_gates ? a.x_gates + t * S * G : input.at(t);
      walk.run(units_items, [&](int64_t item, bool first) {
        const PanelRange r = panel_range(rec, item, units_items);
        const int64_t u0 = r.begin, u1 = r.end;
        step_product(live, h_prev, P, rec, unpacked, a.gate_scale, r, first, g_t, G, work,
                     a.gate_blocks);
        // ended sequences: state kept, trace rows zero
        carry_rows(c_next_t, c_prev_t, live, B, H, u0, u1);
        if (!a.w_proj) carry_rows(h_next, h_prev, live, B, P, u0, u1);
        if (a.keep_trace) {
          if (planes)
            for (int k = 0; k < 4; ++k) zero_rows(planes[k] + t * S * H, live, B, 1, H, u0, u1);
          else
            zero_rows(g_t, live, B, 4, H, u0, u1);
          zero_rows(co_t, live, B, 1, H, u0, u1);
        }
        for (int64_t b = 0; b < live; ++b) {
          T* out = a.w_proj ? m + b * H : h_next + b * P;
          T* const g = g_t + b * G;
          T* const act[4] = {planes ? planes[0] + (t * S + b) * H : g,
                             planes ? planes[1] + (t * S + b) * H : g + H,
                             planes ? planes[2] + (t * S + b) * H : g + 2 * H,
                             planes ? planes[3] + (t * S + b) * H : g + 3 * H};
          gate_math(g, xg_t + b * G, c_prev_t + b * H, c_next_t + b * H, co_t + b * H, out, act,
                    u0, u1);
          if (valid && !valid[b]) {
            T* cn = c_next_t + b * H;
            const T* cp = c_prev_t + b * H;
            for (int64_t u = u0; u < u1; ++u) cn[u] = cp[u];
            if (!a.w_proj)
              for (int64_t u = u0; u < u1; ++u) h_next[b * P + u] = h_prev[b * P + u];
          }
        }
      });
      if (a.w_proj)
        walk.run(proj_items, [&](int64_t item, bool first) {
          const PanelRange r = panel_range(proj, item, proj_items);
          packed_product(live, m, H, proj, r, first, h_next, P, work);
          for (int64_t b = 0; b < B; ++b)
            if (valid && !valid[b])
              for (int64_t q = r.begin; q < r.end; ++q) h_next[b * P + q] = h_prev[b * P + q];
        });
    }
    if (p == 0) walk.wait_all();
  }
};

template <class T>
struct LstmBackwardJob {
  const LstmBackwardArgs<T>& a;
  PackedMatrix<T> rec_t, proj_t;  // Rᵀ: K = 4H, N = P; W_Pᵀ: K = P, N = H
  T* dm;                          // [B, H] gradient of o ⊙ tanh(c) (projection only)
  T* dh_prev;                     // [B, P] dG Rᵀ
  const PerThread<T>* a_packs;
  PhaseQueue* queue;              // the work of the threads that take part

  // Phases: packing (Rᵀ, W_Pᵀ), then per step t (from the last): the emitted columns of dh (an
  // item per range of Rᵀ's panels: dh_t = dG_{t+1} Rᵀ where step t + 1 is valid, + the step's
  // own dh) and the units (an item per range of W_Pᵀ's panels: dm = dh W_Pᵀ with a projection,
  // the gate gradients); without a projection both are over R's units and one item does both.
  // A last phase: dh_0 = dG_0 Rᵀ.
  void run(int p, int participants) {
    const int64_t T_ = a.steps, B = a.batch, H = a.units, P = a.out_units, G = 4 * H;
    const int64_t S = step_rows(a);
    const int64_t emitted_items = phase_items(rec_t.panels(), participants);
    const int64_t unit_items = a.w_proj ? phase_items(proj_t.panels(), participants) : emitted_items;
    const PackedMatrix<T>& unit_matrix = a.w_proj ? proj_t : rec_t;
    T* work = a_packs->of(p);
    const T* wci = a.peep;
    const T* wcf = a.peep ? a.peep + H : nullptr;
    const T* wco = a.peep ? a.peep + 2 * H : nullptr;
    PhaseWalk walk(*queue, p);
    walk.run(emitted_items + (a.w_proj ? unit_items : 0), [&](int64_t item, bool) {
      if (item < emitted_items) {
        const PanelRange r = panel_range(rec_t, item, emitted_items);
        pack_panels(a.w_rec.data, a.w_rec.cs, a.w_rec.rs, rec_t, r.first, r.last);
      } else {
        const PanelRange r = panel_range(proj_t, item - emitted_items, unit_items);
        pack_panels(a.w_proj, 1, P, proj_t, r.first, r.last);
      }
    });
    // dh_t = dG_{t+1} Rᵀ (rows where step t + 1 is valid) for the emitted columns of r
    const auto recurrent = [&](int64_t t_next, const PanelRange& r, bool first) {
      const uint8_t* valid = a.valid ? a.valid + t_next * S : nullptr;
      const int64_t live = recurrent_gradient(a.d_gates + t_next * S * G, G, valid, B, rec_t, r,
                                              first, dh_prev, P, work);
      copy_valid_rows(a.dh, dh_prev, valid, live, P, r.begin, r.end);
    };
    for (int64_t t = T_ - 1; t >= 0; --t) {
      const uint8_t* valid = a.valid ? a.valid + t * S : nullptr;
      const int64_t live = live_rows(valid, B);
      const auto emitted = [&](int64_t item, bool first) {
        const PanelRange r = panel_range(rec_t, item, emitted_items);
        if (t < T_ - 1) recurrent(t + 1, r, first);
        const int64_t p0 = r.begin, p1 = r.end;
        for (int64_t b = 0; b < B; ++b) {
          T* dh = a.dh + b * P;
          add_columns(dh, a.dh_steps ? a.dh_steps + (t * S + b) * P : nullptr, p0, p1);
          if (a.w_proj) {
            T* total = a.dh_total + (t * S + b) * P;
            const bool live_b = !valid || valid[b];
            for (int64_t q = p0; q < p1; ++q) total[q] = live_b ? dh[q] : T(0);
          }
        }
      };
      const auto units = [&](int64_t item, bool first) {
        const PanelRange r = panel_range(unit_matrix, item, unit_items);
        const int64_t u0 = r.begin, u1 = r.end;
        if (a.w_proj) {
          packed_product(live, a.dh, P, proj_t, r, first, dm, H, work);
        }
        zero_rows(a.d_gates + t * S * G, live, B, 4, H, u0, u1);  // ended sequences: dc kept
        if (a.dc_steps)
          for (int64_t b = live; b < B; ++b)
            for (int64_t u = u0; u < u1; ++u) a.dc[b * H + u] += a.dc_steps[(t * S + b) * H + u];
        for (int64_t b = 0; b < live; ++b) {
          const T *i, *f, *cc, *o;
          if (a.gate_planes[0]) {
            const int64_t row = (t * S + b) * H;
            i = a.gate_planes[0] + row; f = a.gate_planes[1] + row;
            cc = a.gate_planes[2] + row; o = a.gate_planes[3] + row;
          } else {
            const T* g = a.gates + (t * S + b) * G;
            i = g; f = g + H; cc = g + 2 * H; o = g + 3 * H;
          }
          const T* co = a.co + (t * S + b) * H;
          const T* cp = a.c + (t * S + b) * H;
          const T* dm_b = a.w_proj ? dm + b * H : a.dh + b * P;
          T* dg = a.d_gates + (t * S + b) * G;
          T *dgi = dg, *dgf = dg + H, *dgc = dg + 2 * H, *dgo = dg + 3 * H;
          T* dc = a.dc + b * H;
          const T* dcs_step = a.dc_steps ? a.dc_steps + (t * S + b) * H : nullptr;
          const bool has_mask = valid != nullptr;
          const T v = (!valid || valid[b]) ? T(1) : T(0);
          for (int64_t u = u0; u < u1; ++u) {
            if (dcs_step) dc[u] += dcs_step[u];
            const T dmu = dm_b[u];
            const T d_o = dmu * ((o[u] * (T(1) - o[u])) * co[u]);
            T dcs = dmu * ((T(1) - co[u] * co[u]) * o[u]);
            dcs += dc[u];
            if (wco) dcs += d_o * wco[u];
            const T d_i = dcs * (cc[u] * (i[u] * (T(1) - i[u])));
            const T d_f = dcs * (cp[u] * (f[u] * (T(1) - f[u])));
            const T d_c = dcs * (i[u] * (T(1) - cc[u] * cc[u]));
            T dc_prev = dcs * f[u];
            if (wci) dc_prev += d_i * wci[u] + d_f * wcf[u];
            if (has_mask) {
              dgi[u] = d_i * v; dgf[u] = d_f * v; dgc[u] = d_c * v; dgo[u] = d_o * v;
              if (v != T(0)) dc[u] = dc_prev;
            } else {
              dgi[u] = d_i; dgf[u] = d_f; dgc[u] = d_c; dgo[u] = d_o;
              dc[u] = dc_prev;
            }
          }
        }
      };
      if (a.w_proj) {
        walk.run(emitted_items, emitted);
        walk.run(unit_items, units);
      } else {
        walk.run(emitted_items, [&](int64_t item, bool first) {
          emitted(item, first);
          units(item, false);
        });
      }
    }
    if (T_ > 0)
      walk.run(emitted_items, [&](int64_t item, bool first) {
        recurrent(0, panel_range(rec_t, item, emitted_items), first);
      });
    if (p == 0) walk.wait_all();
  }
};

// The backward args of rows [b0, b1) of a's batch (a batch slice: run_in_slices).
template <class T>
LstmBackwardArgs<T> backward_rows(const LstmBackwardArgs<T>& a, int64_t b0, int64_t b1) {
  const int64_t H = a.units, P = a.out_units;
  LstmBackwardArgs<T> slice = a;
  slice.batch = b1 - b0;
  slice.step_rows = step_rows(a);
  slice.gates = a.gates ? a.gates + b0 * 4 * H : nullptr;
  for (int k = 0; k < 4; ++k) slice.gate_planes[k] = a.gate_planes[k] ? a.gate_planes[k] + b0 * H : nullptr;
  slice.c = a.c + b0 * H;
  slice.co = a.co + b0 * H;
  slice.h = a.h + b0 * P;
  slice.dh_steps = a.dh_steps ? a.dh_steps + b0 * P : nullptr;
  slice.dc_steps = a.dc_steps ? a.dc_steps + b0 * H : nullptr;
  slice.d_gates = a.d_gates + b0 * 4 * H;
  slice.dh_total = a.dh_total ? a.dh_total + b0 * P : nullptr;
  slice.dh = a.dh + b0 * P;
  slice.dc = a.dc + b0 * H;
  slice.valid = a.valid ? a.valid + b0 : nullptr;
  return slice;
}

}  // namespace

template <class T>
void lstm_forward(const LstmForwardArgs<T>& a, int threads) {
  const int64_t recurrent_bytes = packed_bytes<T>(a.out_units, a.units, 4) +
                                 (a.w_proj ? packed_bytes<T>(a.units, a.out_units, 1) : 0);
  if (runs_in_slices(threads, a.steps, a.batch, a.units, recurrent_bytes)) {
    run_in_slices(a, threads, lstm_forward<T>, [](const LstmForwardArgs<T>& a, int64_t b0, int64_t b1) {
      LstmForwardArgs<T> slice = slice_rows(a, b0, b1, 4 * a.units, a.out_units);
      slice.c = a.c + b0 * a.units;
      if (a.keep_trace) {
        slice.gates = a.gates ? a.gates + b0 * 4 * a.units : nullptr;
        for (int k = 0; k < 4; ++k)
          slice.gate_planes[k] = a.gate_planes[k] ? a.gate_planes[k] + b0 * a.units : nullptr;
        slice.co = a.co + b0 * a.units;
      }
      return slice;
    });
    return;
  }
  LstmForwardJob<T> job{a, {}, {}, {}, nullptr, nullptr, {}, nullptr, step_rows(a), a.gates, a.co, a.c};
  const int64_t BH = a.batch * a.units;
  // inference: the engine's own aligned one-step buffers, rows padded to whole cache lines; a
  // trace in gate planes: one step's gates
  const bool planes = a.keep_trace && a.gate_planes[0];
  Buffer<T> step(a.keep_trace ? (planes ? size_t(4 * BH) : 0) : size_t(4 * BH + BH + 2 * BH));
  if (planes) job.gates = step.data;
  if (!a.keep_trace) {
    job.gates = step.data;
    job.co = step.data + 4 * BH;
    job.c = step.data + 5 * BH;
    for (int64_t i = 0; i < BH; ++i) job.c[i] = a.c[i];
  }
  job.rec.rows = a.out_units; job.rec.columns = a.units; job.rec.groups = 4;
  const UnpackedWeights<T> unpacked(a.steps, step_rows(a), a.w_rec, a.out_units, a.w_in, a.inputs,
                                    4 * a.units, !a.x_gates);
  job.unpacked = unpacked.rec;
  Buffer<T> rec(job.unpacked.data ? 0 : job.rec.values());
  job.rec.data = rec.data;
  int64_t blocks = job.rec.panels();
  size_t proj_values = 0;
  if (a.w_proj) {
    job.proj.rows = a.units; job.proj.columns = a.out_units;
    proj_values = job.proj.values();
    blocks = blocks < job.proj.panels() ? blocks : job.proj.panels();
  }
  Buffer<T> proj(proj_values), m(a.w_proj ? size_t(a.batch * a.units) : 0);
  job.proj.data = proj.data;
  job.m = m.data;
  ProjectionBuffers<T> projection(job.input, job.rec, a.x_gates ? nullptr : a.x, a.inputs,
                                  a.steps, a.batch, a.bias, a.gate_scale, a.valid, unpacked.in,
                                  job.S);
  job.input.blocks = a.gate_blocks;
  const int64_t step_macs = a.batch * (4 * a.units * (a.out_units + (a.x_gates ? 0 : a.inputs)) +
                                       (a.w_proj ? a.units * a.out_units : 0));
  const int team = loop_team_size(threads, blocks, step_macs, job.rec.bytes() + job.proj.bytes());
  const int64_t depth = a.units > a.out_units ? a.units : a.out_units;  // K of R and of W_P
  PerThread<T> a_packs(team, loop_workspace_values<T>(a.batch, depth, projection));
  job.a_packs = &a_packs;
  run_open_job(job, team);
  if (!a.keep_trace)  // the caller's c holds two steps: the result goes where it expects it
    for (int64_t i = 0; i < BH; ++i)
      a.c[(a.steps % 2) * job.S * a.units + i] = job.c[(a.steps % 2) * BH + i];
}

template <class T>
void lstm_backward(const LstmBackwardArgs<T>& a, int threads) {
  LstmBackwardJob<T> job{a, {}, {}, nullptr, nullptr, nullptr, nullptr};
  job.rec_t.rows = 4 * a.units; job.rec_t.columns = a.out_units;
  int64_t blocks = job.rec_t.panels();
  if (a.w_proj) {
    job.proj_t.rows = a.out_units; job.proj_t.columns = a.units;
    blocks = blocks < job.proj_t.panels() ? blocks : job.proj_t.panels();
  }
  const int64_t step_macs = a.batch * (4 * a.units * a.out_units + (a.w_proj ? a.units * a.out_units : 0));
  const int64_t packed_bytes = job.rec_t.bytes() + job.proj_t.bytes();
  if (backward_runs_in_slices(threads, a.batch, step_macs, packed_bytes)) {
    run_in_slices(a, threads, lstm_backward<T>, backward_rows<T>);
    return;
  }
  Buffer<T> rec_t(job.rec_t.values()), proj_t(a.w_proj ? job.proj_t.values() : 0),
      dm(a.w_proj ? size_t(a.batch * a.units) : 0), dh_prev(size_t(a.batch * a.out_units));
  job.rec_t.data = rec_t.data;
  job.proj_t.data = proj_t.data;
  job.dm = dm.data;
  job.dh_prev = dh_prev.data;
  const int team = loop_team_size(threads, blocks, step_macs, packed_bytes);
  PerThread<T> a_packs(team, gemm_workspace_values<T>(a.batch, 4 * a.units > a.out_units ? 4 * a.units : a.out_units));
  job.a_packs = &a_packs;
  run_open_job(job, team);
}

template void lstm_forward<float>(const LstmForwardArgs<float>&, int);
template void lstm_forward<double>(const LstmForwardArgs<double>&, int);
template void lstm_backward<float>(const LstmBackwardArgs<float>&, int);
template void lstm_backward<double>(const LstmBackwardArgs<double>&, int);

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn

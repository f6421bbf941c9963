// Declarations of one ISA's kernels (lstm.cc, gru.cc, rnn.cc, gemm.cc, sums.cc), collected by
// isa_table.cc.
#pragma once

#include <exception>
#include <mutex>
#include <vector>

#include "engine.h"
#include "gemm_kernels.h"

namespace fusedrnn {
namespace FUSEDRNN_ISA {

template <class T> void lstm_forward(const LstmForwardArgs<T>& args, int threads);
template <class T> void lstm_backward(const LstmBackwardArgs<T>& args, int threads);
template <class T> void gru_forward(const GruForwardArgs<T>& args, int threads);
template <class T> void gru_backward(const GruBackwardArgs<T>& args, int threads);
template <class T> void rnn_forward(const RnnForwardArgs<T>& args, int threads);
template <class T> void rnn_backward(const RnnBackwardArgs<T>& args, int threads);
template <class T> void gemm(const GemmArgs<T>& args, int threads);
template <class T> void product_sum(int64_t rows, int64_t cols, const T* a, int64_t a_rs, const T* b,
                                    int64_t b_rs, T* out);
template <class T> void column_sum(int64_t rows, int64_t cols, const T* a, int64_t a_rs, T* out);

// out[c] += double(tile[c]) for c < width, whole vectors where width allows (each element one
// float64 add, in any vector grouping: the same bits as the scalar loop).
template <class T>
inline void add_to_sums(const T* tile, double* out, int64_t width) {
  constexpr int W = Vec<T>::width;
  typedef double Wide __attribute__((vector_size(W * sizeof(double))));
  int64_t c = 0;
  for (; c + W <= width; c += W) {
    Wide sum, add = __builtin_convertvector(load(tile + c), Wide);
    std::memcpy(&sum, out + c, sizeof sum);
    sum += add;
    std::memcpy(out + c, &sum, sizeof sum);
  }
  for (; c < width; ++c) out[c] += double(tile[c]);
}

// Team size for a job whose phases split `blocks` panels each: never more threads than blocks.
inline int team_size(int threads, int64_t blocks) {
  if (blocks < 1) return 1;
  return int(threads < blocks ? threads : blocks);
}

// Team size for a time loop whose phases split `blocks` panels and whose steps take `step_macs`
// multiply-adds, reading a packed matrix of `packed_bytes` each step: each thread gets at least
// min_step_macs_per_thread of a step.  A step's meeting (the new state crossing between cores,
// the phase counters) cost 1-2 µs on the 2-vCPU VMs we measured, more than a second thread saved
// on a step of 64K multiply-adds: LSTM H = 128, B = 1, T = 25 ran its forward loop in 0.72-0.85x
// and its backward loop in 0.57-0.62x of one thread's speed on two (docs/performance.md,
// session 15).  Not when the matrix does not stay in one core's L2 (fits_half_l2; an unknown L2
// counts as too small): shared out, each thread's part of it stays in its own cache (LSTM
// H = 256, B = 1: 1.45-1.6x on two threads).
inline int loop_team_size(int threads, int64_t blocks, int64_t step_macs, int64_t packed_bytes) {
  const int team = team_size(threads, blocks);
  const int64_t per_thread = min_step_macs_per_thread.load(std::memory_order_relaxed);
  if (team <= 1 || per_thread <= 0 || !fits_half_l2(packed_bytes)) return team;
  const int64_t most = step_macs / per_thread;
  return most < 1 ? 1 : (most < team ? int(most) : team);
}

// Zeroes units [u0, u1) of `groups` groups of `width` columns in rows [first, last) of a
// [rows, groups·width] array: the trace and gradient rows of steps a sequence does not have.
template <class T>
inline void zero_rows(T* a, int64_t first, int64_t last, int64_t groups, int64_t width, int64_t u0,
                      int64_t u1) {
  for (int64_t b = first; b < last; ++b)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t u = u0; u < u1; ++u) a[(b * groups + g) * width + u] = T(0);
}

// Copies units [u0, u1) of rows [first, last) of a [rows, width] state from `from` to `to`: the
// state a sequence that has ended carries to the next step.
template <class T>
inline void carry_rows(T* to, const T* from, int64_t first, int64_t last, int64_t width, int64_t u0,
                       int64_t u1) {
  for (int64_t b = first; b < last; ++b)
    for (int64_t u = u0; u < u1; ++u) to[b * width + u] = from[b * width + u];
}

// Runs `Job::run(thread, num_threads, sync)` of a job object on the team; `flops` estimates the
// job's work (it sizes the wait for workers that are still waking up, and small jobs may run on
// the caller alone: csrc/team.cc).
template <class Job>
void run_job(Job& job, int threads, int64_t flops) {
  run_team(threads, [](void* context, int t, int n, Sync* sync) {
    static_cast<Job*>(context)->run(t, n, sync);
  }, &job, flops);
}

// Item `item` of a phase's `items` over the panels of a packed matrix: panels [first, last),
// columns [begin, end) of each column group.  Whole blocks of kPanelsPerBlock panels, so that
// every kernel call of a step takes as many panels as it can (at H = 256 on two threads, single
// panels left the AVX-512 kernel at half its accumulators).
struct PanelRange {
  int64_t first, last, begin, end;
};

inline int64_t panel_blocks(int64_t panels) { return (panels + kPanelsPerBlock - 1) / kPanelsPerBlock; }

template <class T>
PanelRange panel_range(const PackedMatrix<T>& m, int64_t item, int64_t items) {
  PanelRange r;
  split_blocks(panel_blocks(m.panels()), int(item), int(items), &r.first, &r.last);
  r.first *= kPanelsPerBlock;
  r.last = r.last * kPanelsPerBlock < m.panels() ? r.last * kPanelsPerBlock : m.panels();
  r.begin = r.first * m.nr;
  r.end = r.last * m.nr < m.columns ? r.last * m.nr : m.columns;
  return r;
}

// C[m, g·N + n] = Σ_k A[m, k] B[k, g·N + n] for rows m < M and the columns n of the panel
// range r in every group g, B packed (`m`); `first`: this thread's first range of the product,
// which packs A into `work`.
template <class T>
void packed_product(int64_t M, const T* A, int64_t lda, const PackedMatrix<T>& m,
                    const PanelRange& r, bool first, T* C, int64_t ldc, T* work) {
  if (first) pack_gemm_rows(M, A, lda, m, work);
  gemm_packed(M, work, m, r.first, r.last, C, ldc, work);
}

// One step's product for the panel range r of a forward loop's recurrent matrix: C[m, g·N + n]
// = Σ_k A[m, k] R[k, g·N + n] for rows m < M and r's columns n of every group g.  From R's
// panels (`m`; `first`: this thread's first range of the step, which packs A into `work`), or,
// when `unpacked` holds R (reads_unpacked), from R where it lies (unpacked_product), R's
// columns times scale[g·N + n] (the scale the packing applies; null: none); group g in R's column
// block blocks[g] (null: block g).
template <class T>
void step_product(int64_t M, const T* A, int64_t lda, const PackedMatrix<T>& m,
                  const StridedMatrix<T>& unpacked, const T* scale, const PanelRange& r, bool first,
                  T* C, int64_t ldc, T* work, const int64_t* blocks = nullptr) {
  if (unpacked.data) {
    for (int64_t g = 0; g < m.groups; ++g)
      unpacked_product(M, A, lda, m.rows, column_group(unpacked, g, m.columns, blocks), r.begin, r.end,
                       scale ? scale + g * m.columns : nullptr, C + g * m.columns, ldc);
    return;
  }
  packed_product(M, A, lda, m, r, first, C, ldc, work);
}

// A backward step's dh_t = dG_{t+1} Rᵀ for the columns of r into dh_prev (row stride ldc), over
// the rows up to the last valid one of step t + 1 (`valid_next`: its [B] mask, or null), whose
// count it returns.  `first`: as in packed_product.
template <class T>
int64_t recurrent_gradient(const T* d_next, int64_t ld, const uint8_t* valid_next, int64_t B,
                           const PackedMatrix<T>& rec_t, const PanelRange& r, bool first,
                           T* dh_prev, int64_t ldc, T* work) {
  const int64_t live = live_rows(valid_next, B);
  packed_product(live, d_next, ld, rec_t, r, first, dh_prev, ldc, work);
  return live;
}

// to[b · width + n] = from[b · width + n] for columns [begin, end) of the rows b < live that are
// valid (`valid` null: all); the other rows keep theirs.
template <class T>
inline void copy_valid_rows(T* to, const T* from, const uint8_t* valid, int64_t live,
                            int64_t width, int64_t begin, int64_t end) {
  for (int64_t b = 0; b < live; ++b) {
    if (valid && !valid[b]) continue;
    for (int64_t n = begin; n < end; ++n) to[b * width + n] = from[b * width + n];
  }
}

// to[n] += from[n] for n in [begin, end); nothing when `from` is null (no per-step gradient).
template <class T>
inline void add_columns(T* to, const T* from, int64_t begin, int64_t end) {
  if (from)
    for (int64_t n = begin; n < end; ++n) to[n] += from[n];
}

// The recurrent and input matrices a forward loop reads unpacked (data null: packed), by
// reads_unpacked (`columns`: G·H, both matrices' width): R whenever its layout and size say so,
// W only for a single step of at most kOnceMaxRows rows
// (projections of more rows run faster packed: docs/performance.md).  `batch`: the rows of the
// whole batch, also in a batch slice (step_rows), so that a slice reads them as the batch does.
constexpr int64_t kOnceMaxRows = 16;  // the rows of a single step read in place (reads_unpacked)
template <class T>
struct UnpackedWeights {
  StridedMatrix<T> rec, in;
  UnpackedWeights(int64_t steps, int64_t batch, const StridedMatrix<T>& w_rec, int64_t rec_depth,
                  const StridedMatrix<T>& w_in, int64_t in_depth, int64_t columns, bool has_x) {
    const bool once = steps == 1 && batch <= kOnceMaxRows;
    if (reads_unpacked(batch, w_rec, rec_depth, columns, once)) rec = w_rec;
    if (has_x && once && reads_unpacked(batch, w_in, in_depth, columns, once)) in = w_in;
  }
};

// Items per phase of an open time loop over `panels` panels (panel_range): a few per thread (a
// late or slow thread's share is taken over in small pieces), one for a thread alone.
inline int64_t phase_items(int64_t panels, int participants) {
  const int64_t most = participants > 1 ? 4 * int64_t(participants) : 1;
  const int64_t blocks = panel_blocks(panels);
  return blocks < most ? (blocks > 0 ? blocks : 1) : most;
}

// One participant's walk through the phases of an open job, in order.
class PhaseWalk {
 public:
  PhaseWalk(PhaseQueue& queue, int participant) : queue_(queue), participant_(participant) {}
  // Once the phases before are done: item(i, first) for each item i of the next phase that this
  // thread takes (`first`: its first one in this phase, e.g. to pack an operand they share).
  template <class Item>
  void run(int64_t items, Item item) {
    queue_.wait_open(phase_);
    int64_t count = 0, i = 0;
    while (queue_.claim(participant_, phase_, items, &i)) {
      item(i, count == 0);
      ++count;
    }
    queue_.finish(phase_, items, count);
    ++phase_;
  }
  // Returns once every phase walked so far is done (the caller, before the job's results are read).
  void wait_all() { queue_.wait_open(phase_); }

 private:
  PhaseQueue& queue_;
  int participant_;
  int64_t phase_ = 0;
};

// A phase over ranges of m's panels: item(range, first) for each PanelRange this thread takes
// (PhaseWalk::run).
template <class T, class Item>
void panel_phase(PhaseWalk& walk, const PackedMatrix<T>& m, int64_t items, Item item) {
  walk.run(items, [&](int64_t i, bool first) { item(panel_range(m, i, items), first); });
}

// A forward loop's input-projection phase: at a step t that starts a chunk of the in-loop
// projection (ChunkedProjection, x given), x W + b of the chunk, an item per range of the
// `panels` panels; no phase at other steps.
template <class T>
void projection_phase(PhaseWalk& walk, const ChunkedProjection<T>& input, int64_t t, int64_t steps,
                      int64_t items, T* work) {
  if (!input.x || !input.starts_chunk(t)) return;
  walk.run(items, [&](int64_t item, bool first) {
    const PanelRange r = panel_range(input.w, item, items);
    input.compute(t, steps, r.first, r.last, work, first);
  });
}

// Batch slices: a forward loop of at most kSliceMaxUnits units and at least kSliceRows rows per
// thread (kSliceFitRows when the packed matrices read every step, `packed_bytes`, stay in half of
// one core's L2) runs as `threads` slices of the batch, each slice's whole time
// loop on the thread that takes it (its own packed weights: a copy per slice): no per-step
// meeting, and no state crossing between cores.  Each row's results are those of the whole
// batch's loop (every product and gate value of a row is computed the same way whatever the
// rows computed with it).  Measured (2 threads, inference; docs/native_engine.md "Batch
// slices"): LSTM H = 128, B = 64 7.6 -> 6.4 ms back to back, 15.4 -> 9.0 ms after a quiet
// spell; GRU H = 256, B = 64 26.4 -> 22.3 ms; H = 512 slower or even; at 8 rows a thread
// 3-11 % slower where R left half the L2 (1 MiB L2), 14-27 % faster where it stayed (2 MiB L2:
// lstm-H128-B16-T50 and H256 forward, gru-H256-B16-T50 forward).
constexpr int64_t kSliceRows = 16;
constexpr int64_t kSliceFitRows = 8;
constexpr int64_t kSliceMaxUnits = 256;

// Never a single step: there is no per-step meeting for slices to save, and a single step of at
// most kOnceMaxRows rows reads its weights in place (UnpackedWeights, which a slice decides from
// its whole batch's rows, step_rows, so that its bits stay the whole batch's).
inline bool runs_in_slices(int threads, int64_t steps, int64_t batch, int64_t units, int64_t packed_bytes) {
  if (threads <= 1 || steps < 2 || units > kSliceMaxUnits) return false;
  return batch >= kSliceRows * threads || (batch >= kSliceFitRows * threads && fits_half_l2(packed_bytes));
}

// Bytes of a packed [rows, groups · columns] matrix (PackedMatrix::bytes).
template <class T>
int64_t packed_bytes(int64_t rows, int64_t columns, int64_t groups) {
  PackedMatrix<T> m;
  m.rows = rows; m.columns = columns; m.groups = groups;
  return m.bytes();
}

// Batch slices for a backward loop (the gate gradients of a row, like its forward values, depend
// on no other row; the weight gradients are summed after the loop): at least kBackwardSliceRows
// rows per thread, and either the packed matrices read every step (`packed_bytes`) staying in
// half of one core's L2 or kBackwardSliceStreamRows rows per thread to share each pass over
// them.  The loop must have work for the whole team (loop_team_size).  Measured (2
// threads, the LSTM backward loop alone, docs/native_engine.md "Batch slices"): H = 128, B = 16
// 1.06 -> 0.65 ms; H = 256, B = 64 4.7 -> 3.6; H = 1024, B = 64 52.7 -> 49.9; slower where
// each thread streams all of Rᵀ for 8 or 16 rows (H = 384, B = 16 4.7 -> 5.7; H = 512, B = 32
// 7.9 -> 8.1).
constexpr int64_t kBackwardSliceRows = 8;
constexpr int64_t kBackwardSliceStreamRows = 32;

inline bool backward_runs_in_slices(int threads, int64_t batch, int64_t step_macs, int64_t packed_bytes) {
  if (threads <= 1 || batch < kBackwardSliceRows * threads) return false;
  if (!fits_half_l2(packed_bytes) && batch < kBackwardSliceStreamRows * threads) return false;
  return loop_team_size(threads, threads, step_macs, packed_bytes) == threads;
}

// Rows between two steps of a forward loop's arrays (Args::step_rows; 0 means the batch).
template <class Args>
inline int64_t step_rows(const Args& a) {
  return a.step_rows ? a.step_rows : a.batch;
}

// The args of rows [b0, b1) of a's batch: x, x_gates (`gate_columns` wide) and h
// (`state_columns` wide) from row b0 on, with a's step stride; the cell's other arrays are the
// caller's to offset.
template <class Args>
Args slice_rows(const Args& a, int64_t b0, int64_t b1, int64_t gate_columns, int64_t state_columns) {
  Args slice = a;
  slice.batch = b1 - b0;
  slice.step_rows = step_rows(a);
  slice.x = a.x ? a.x + b0 * a.inputs : nullptr;
  slice.x_gates = a.x_gates ? a.x_gates + b0 * gate_columns : nullptr;
  slice.h = a.h + b0 * state_columns;
  slice.valid = a.valid ? a.valid + b0 : nullptr;
  return slice;
}

// The first rows of the `slices` slices of a's batch, then a.batch: equal numbers of rows, or,
// with a mask (a.valid: [steps, step_rows]), about equal numbers of valid steps (a
// variable-length batch sorted by length gives its first slices fewer, longer rows); a slice
// may be empty.
template <class Args>
std::vector<int64_t> slice_starts(const Args& a, int64_t slices) {
  std::vector<int64_t> starts(size_t(slices + 1), a.batch);
  int64_t end;
  if (!a.valid) {
    for (int64_t s = 0; s < slices; ++s) split_blocks(a.batch, int(s), int(slices), &starts[size_t(s)], &end);
    return starts;
  }
  const int64_t S = step_rows(a);
  std::vector<int64_t> steps_before(size_t(a.batch + 1), 0);  // the valid steps of rows [0, b)
  for (int64_t b = 0; b < a.batch; ++b) {
    int64_t n = 0;
    for (int64_t t = 0; t < a.steps; ++t) n += a.valid[t * S + b] ? 1 : 0;
    steps_before[size_t(b + 1)] = steps_before[size_t(b)] + n;
  }
  const int64_t total = steps_before[size_t(a.batch)];
  // slice s starts at the first row whose preceding rows hold at least s/slices of the steps
  for (int64_t s = 0, b = 0; s < slices; ++s) {
    while (b < a.batch && steps_before[size_t(b)] * slices < total * s) ++b;
    starts[size_t(s)] = b;
  }
  return starts;
}

// Runs forward(slice(a, b0, b1), 1) for `slices` slices [b0, b1) of a's batch on the team (an
// open job whose items are the slices: each participant takes the next one left, so a late
// worker takes none and the caller runs them all).  `slice` gives the args of rows [b0, b1)
// (slice_rows and the cell's own arrays).  A slice allocates its own workspace, on whichever
// thread runs it: the first exception (std::bad_alloc) stops the slices not yet begun and is
// rethrown to the caller.
template <class Args, class Forward, class Slice>
void run_in_slices(const Args& a, int slices, Forward forward, Slice slice) {
  sliced_loops.fetch_add(1, std::memory_order_relaxed);
  struct Job {
    Job(const Args& args, Forward& f, Slice& s, int64_t n)
        : a(args), forward(f), slice(s), slices(n), starts(slice_starts(args, n)) {}
    const Args& a;
    Forward& forward;
    Slice& slice;
    int64_t slices;
    std::vector<int64_t> starts;
    std::atomic<int64_t> next{0};
    std::mutex failure;
    std::exception_ptr error;
    void run() {
      for (int64_t s = next.fetch_add(1); s < slices; s = next.fetch_add(1)) {
        const int64_t b0 = starts[size_t(s)], b1 = starts[size_t(s + 1)];
        if (b1 <= b0) continue;
        try {
          forward(slice(a, b0, b1), 1);
        } catch (...) {
          std::lock_guard<std::mutex> lock(failure);
          if (!error) error = std::current_exception();
          next.store(slices);
        }
      }
    }
  } job(a, forward, slice, slices);
  run_team_open(slices, [](void* context, int, int, Sync*) { static_cast<Job*>(context)->run(); },
                &job);
  if (job.error) std::rethrow_exception(job.error);
}

// Runs `Job::run(participant, participants)` of an open job (run_team_open) on the team, its
// work shared through `job.queue` (a PhaseQueue for `threads` participants, set here).
template <class Job>
void run_open_job(Job& job, int threads) {
  PhaseQueue queue(threads);
  job.queue = &queue;
  run_team_open(threads, [](void* context, int p, int n, Sync*) {
    static_cast<Job*>(context)->run(p, n);
  }, &job);
}

}  // namespace FUSEDRNN_ISA
}  // namespace fusedrnn

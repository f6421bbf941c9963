// The interface between the ISA-independent part of the native engine (bindings, dispatch, the
// thread team) and the time-loop kernels, which are compiled once per instruction set.
//
// Shape legend: T steps, B batch, H units, P emitted size (Hout: the projection size for an
// LSTM with projection, else H).  Every array is C-contiguous, time-major, in scan order, and
// has exactly the shape stated; the Python side validates and allocates them (no bounds checks
// here).  valid[T, B] (1 = the step belongs to the sequence) may be null: every step valid.
#pragma once

#include <atomic>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fusedrnn {

// A matrix read through element strides: (r, c) at data[r · rs + c · cs] (a weight matrix may be
// a transposed view into the caller's parameter buffer; it is packed once per call anyway).
template <class T>
struct StridedMatrix {
  const T* data = nullptr;
  int64_t rs = 0, cs = 1;
};

// LSTM forward over one pseudo-layer (fusedrnn/engines/lstm.py has the math).  x_gates and
// w_rec come with the sigmoid gates' columns (i, f, o) already halved, peep (wci, wcf, wco:
// [3, H]) too, so that one tanh gives every gate: σ(z) = (1 + tanh(z/2)) / 2.
//
// The input projection is either given (x_gates) or computed inside the loop from x, w_in,
// bias and gate_scale, a chunk of steps at a time, each thread its own columns:
// x_gates = (x W + b) ⊙ gate_scale, the NumPy engine's operations in its order.  keep_trace =
// false (inference): gates and co are single-step buffers [1, B, ...] and c holds two steps
// [2, B, H] used in turn (c[t % 2]); only h is recorded for every step.
template <class T>
struct LstmForwardArgs {
  int64_t steps, batch, units, out_units;  // T, B, H, P
  const T* x_gates;   // [T, B, 4H]  x W + b, halved columns; or null, then:
  const T* x;         // [T, B, I]
  StridedMatrix<T> w_in;  // [I, 4H]
  const T* bias;      // [4H]
  const T* gate_scale;  // [4H]      0.5 for the sigmoid gates' columns, 1 for c': R is halved
                        //           while packed, x W + b here
  int64_t inputs;     // I
  StridedMatrix<T> w_rec;  // [P, 4H] (not halved)
  const T* peep;      // [3, H] halved, or null
  const T* w_proj;    // [H, P] or null (then P == H)
  const uint8_t* valid;
  T cell_clip;        // > 0: clip c to [-clip, clip]
  bool keep_trace;
  T* gates;           // [T, B, 4H]  out: i, f, c', o activations
  T* c;               // [T+1, B, H] c[0] given, c[1:] out
  T* co;              // [T, B, H]   out: tanh(c[t+1])
  T* h;               // [T+1, B, P] h[0] given, h[1:] out
  const int64_t* gate_blocks;  // [4] or null: the column block of w_in and w_rec that holds gate
                               // i, f, c, o (BlockLSTM's ICFO layout read as it is: 0, 2, 1, 3)
  // Rows between the steps of x, x_gates, h, c, gates and co (0: `batch`): more when the loop
  // runs on rows [b0, b0 + batch) of a larger batch (lstm_forward's batch slices: the pointers
  // then start at row b0; no mask).
  int64_t step_rows;
  // With keep_trace: the activations of gate k (i, f, c', o) of row b of step t at
  // gate_planes[k][(t · step_rows + b) · H + u] ([T, B, H] arrays: BlockLSTM's own outputs)
  // instead of in `gates`, which is then not used; null: in `gates`.
  T* gate_planes[4];
};

template <class T>
struct LstmBackwardArgs {
  int64_t steps, batch, units, out_units;
  const T* gates; const T* c; const T* co; const T* h;   // the forward's trace
  StridedMatrix<T> w_rec;  // [P, 4H] (not halved)
  const T* peep;      // [3, H] (not halved) or null
  const T* w_proj;    // [H, P] or null
  const T* dh_steps;  // [T, B, P] or null
  const T* dc_steps;  // [T, B, H] or null
  const uint8_t* valid;
  T* d_gates;         // [T, B, 4H] out: pre-activation gradients (masked)
  T* dh_total;        // [T, B, P]  out (projection only): dL/dh_t, masked
  T* dh;              // [B, P] in: dL/dh_T, out: dL/dh_0
  T* dc;              // [B, H] in: dL/dc_T, out: dL/dc_0
  const T* gate_planes[4];  // or null: the forward's gates as [T, B, H] planes (then `gates` is not read)
  int64_t step_rows;  // rows between the steps of every [T, ...] array, 0: `batch` (a batch slice)
};

template <class T>
struct GruForwardArgs {
  int64_t steps, batch, units;
  const T* x_gates;   // [T, B, 3H] x W + bW; or null, then computed in the loop (as the LSTM's):
  const T* x;         // [T, B, I]
  StridedMatrix<T> w_in;  // [I, 3H]
  const T* bias_in;   // [3H] bW
  int64_t inputs;     // I
  StridedMatrix<T> w_rec;  // [H, 3H]
  const T* b_rec;     // [3H]
  const uint8_t* valid;
  T* gates;           // [T, B, 3H] out: r, u, h'
  T* q_h;             // [T, B, H]  out: h_{t-1} R_h + bR_h
  T* h;               // [T+1, B, H]
  bool keep_trace;    // false (inference): gates and q_h hold one step, overwritten each step
  int64_t step_rows;  // rows between steps, 0: `batch` (more in a batch slice: LstmForwardArgs)
};

template <class T>
struct GruBackwardArgs {
  int64_t steps, batch, units;
  const T* gates; const T* q_h; const T* h;
  StridedMatrix<T> w_rec;  // [H, 3H]
  const T* dh_steps;  // [T, B, H] or null
  const uint8_t* valid;
  T* d_a;             // [T, B, 3H] out: gradient of the input pre-activations
  T* d_q;             // [T, B, 3H] out: gradient of the recurrent pre-activations
  T* dh;              // [B, H] in/out
  int64_t step_rows;  // rows between the steps of every [T, ...] array, 0: `batch` (a batch slice)
};

template <class T>
struct RnnForwardArgs {
  int64_t steps, batch, units;
  const T* x_gates;   // [T, B, H] x W + b; or null, then computed in the loop (as the LSTM's):
  const T* x;         // [T, B, I]
  StridedMatrix<T> w_in;  // [I, H]
  const T* bias;      // [H]
  int64_t inputs;     // I
  StridedMatrix<T> w_rec;  // [H, H]
  bool relu;          // else tanh
  const uint8_t* valid;
  T* h;               // [T+1, B, H]
};

template <class T>
struct RnnBackwardArgs {
  int64_t steps, batch, units;
  const T* h;
  StridedMatrix<T> w_rec;
  bool relu;
  const T* dh_steps;
  const uint8_t* valid;
  T* d_pre;           // [T, B, H] out
  T* dh;              // [B, H] in/out
};

// C[M, N] = A[M, K] B[K, N] with A[m, k] at A[m · a_rs + k · a_cs] and B[k, n] at
// B[k · b_rs + n · b_cs] (csrc/gemm.cc).  accurate (float only): float32 sums over blocks of 64
// k, added in float64.  K = 0 gives zeros.
template <class T>
struct GemmArgs {
  int64_t M, N, K;
  const T* A; int64_t a_rs, a_cs;
  const T* B; int64_t b_rs, b_cs;
  T* C; int64_t ldc;
  bool accurate;
  // Row gathers (null: none), each strictly increasing: k_rows [K] (A transposed, a_rs = 1, and
  // B with contiguous rows, b_cs = 1): term k reads A's column and B's row k_rows[k]; m_rows [M]
  // (A with contiguous rows, a_cs = 1; not accurate): output row m reads A's row and writes C's
  // row m_rows[m].  The products of the gathered matrices, the same bits.
  const int64_t* k_rows = nullptr;
  const int64_t* m_rows = nullptr;
};

// One instruction set's kernels.  `threads` is the team size asked for; results do not depend
// on it (each thread owns whole output rows or columns, no reduction is split).
struct EngineTable {
  const char* name;
  int panel_width_float, panel_width_double;  // NR of the packed GEMM panels
  void (*lstm_forward_f)(const LstmForwardArgs<float>&, int threads);
  void (*lstm_forward_d)(const LstmForwardArgs<double>&, int threads);
  void (*lstm_backward_f)(const LstmBackwardArgs<float>&, int threads);
  void (*lstm_backward_d)(const LstmBackwardArgs<double>&, int threads);
  void (*gru_forward_f)(const GruForwardArgs<float>&, int threads);
  void (*gru_forward_d)(const GruForwardArgs<double>&, int threads);
  void (*gru_backward_f)(const GruBackwardArgs<float>&, int threads);
  void (*gru_backward_d)(const GruBackwardArgs<double>&, int threads);
  void (*rnn_forward_f)(const RnnForwardArgs<float>&, int threads);
  void (*rnn_forward_d)(const RnnForwardArgs<double>&, int threads);
  void (*rnn_backward_f)(const RnnBackwardArgs<float>&, int threads);
  void (*rnn_backward_d)(const RnnBackwardArgs<double>&, int threads);
  void (*gemm_f)(const GemmArgs<float>&, int threads);
  void (*gemm_d)(const GemmArgs<double>&, int threads);
  // out[c] = Σ_r a[r, c] b[r, c] over a, b [rows, cols] (row strides a_rs, b_rs; columns
  // contiguous), summed in float64 in row order (csrc/sums.cc); one thread.
  void (*product_sum_f)(int64_t rows, int64_t cols, const float* a, int64_t a_rs, const float* b,
                        int64_t b_rs, float* out);
  void (*product_sum_d)(int64_t rows, int64_t cols, const double* a, int64_t a_rs, const double* b,
                        int64_t b_rs, double* out);
  // out[c] = Σ_r a[r, c] over a [rows, cols] (row stride a_rs; columns contiguous): the order of
  // fusedrnn/engines/common.py column_sum (csrc/sums.cc); one thread.
  void (*column_sum_f)(int64_t rows, int64_t cols, const float* a, int64_t a_rs, float* out);
  void (*column_sum_d)(int64_t rows, int64_t cols, const double* a, int64_t a_rs, double* out);
  // dst[i, j] = src[i, j] for a rows × cols matrix, both through element strides (an exact copy;
  // a transposing one in register tiles: csrc/pack.h copy_matrix); one thread.
  void (*copy_f)(int64_t rows, int64_t cols, const float* src, int64_t srs, int64_t scs, float* dst,
                 int64_t drs, int64_t dcs);
  void (*copy_d)(int64_t rows, int64_t cols, const double* src, int64_t srs, int64_t scs,
                 double* dst, int64_t drs, int64_t dcs);
  // Test/benchmark hooks: tanh over n values; C[M, N] = A[M, K] B[K, N] through the packed
  // kernel (B packed once, the product computed `repeats` times).
  void (*tanh_f)(const float* in, float* out, int64_t n);
  void (*tanh_d)(const double* in, double* out, int64_t n);
  void (*step_gemm_f)(int64_t M, int64_t K, int64_t N, const float* A, const float* Bm, float* C,
                      int64_t repeats);
  void (*step_gemm_d)(int64_t M, int64_t K, int64_t N, const double* A, const double* Bm,
                      double* C, int64_t repeats);
};

// Defined in dispatch.cc: the tables compiled into this build (null where not compiled).
const EngineTable* table_portable();
const EngineTable* table_avx2();
const EngineTable* table_avx512();

// ---- services of the ISA-independent part, callable from the kernels (team.cc) ----

// Barrier of the team running the current job.
class Sync {
 public:
  virtual void wait() = 0;
  virtual ~Sync() = default;
};

using JobFunction = void (*)(void* context, int thread, int num_threads, Sync* sync);

// Runs job(context, t, n, sync) for t = 0..n-1 on the engine's persistent team (the caller is
// thread 0), n <= threads: the workers that check in within a join window scaled by `flops`
// (the job's estimated floating-point operations).  When the team is busy (another Python
// thread is inside a call) the job runs on the calling thread alone (n = 1).  Every job gives
// the same bits for any n.
void run_team(int threads, JobFunction job, void* context, int64_t flops);

// dst[i, j, :] = src[i, index[j], :] for i < outer, j < count: rows of `row_bytes` bytes, src's
// `outer_stride` and `inner_stride` bytes apart, dst's contiguous (csrc/gather.cc); on up to
// `threads` threads of the team.  The caller checks every index.
void gather_rows(const char* src, int64_t outer, int64_t outer_stride, int64_t inner_stride,
                 const int64_t* index, int64_t count, int64_t row_bytes, char* dst, int threads);

// Sleeping workers start waking up (a call is coming; waking a halted vCPU takes up to ms).
void wake_team();

// An open job: job(context, p, participants, nullptr) runs on the caller (p = 0) at once and on
// each worker that arrives while the caller is still inside it (p = 1, 2, ... in order of
// arrival, p < participants ≤ threads), however late.  The job shares its work through a
// PhaseQueue, so whoever takes part computes it and nobody waits for a worker that is still
// waking up; run_team_open returns when the caller's call has returned and every worker has
// left the job.  When the team is busy the caller runs it alone.
void run_team_open(int threads, JobFunction job, void* context);

// The work of an open job: phases 0, 1, ... in order, phase q of items(q) ≥ 1 items; an item
// of phase q starts only once every item of phase q - 1 is done (wait_open).  Participant p
// claims the items of its own share of a phase first (split_blocks(items, p, participants):
// with a full team each thread keeps the same items, and their cache lines, from step to step),
// then takes the items left in the others' shares (a thread that is absent or slow is covered
// by those that are there).  Which thread computes an item never changes its result.
class PhaseQueue {
 public:
  explicit PhaseQueue(int participants);
  ~PhaseQueue();
  PhaseQueue(const PhaseQueue&) = delete;
  PhaseQueue& operator=(const PhaseQueue&) = delete;
  // Returns once every item of the phases before `phase` is done.
  void wait_open(int64_t phase);
  // An item of `phase` (of `items`) not yet taken, taken for `participant`: false when none is left.
  bool claim(int participant, int64_t phase, int64_t items, int64_t* item);
  // This thread has done `count` items of `phase` (after its last claim in it).
  void finish(int64_t phase, int64_t items, int64_t count);

 private:
  struct alignas(64) Share {
    std::atomic<uint64_t> next{0};  // (phase + 1) << 32 | next item of the share; 0: untouched
  };
  int participants_;
  Share* shares_;
  alignas(64) std::atomic<uint64_t> done_{0};  // phase << 32 | its items done
};

// Test hook: a worker waits this long after it sees a job before it tries to join it (a worker
// still waking up, or one that arrives after the job is done).
void set_join_delay_ns(int64_t ns);

// Worker placement (team.cc): before each job on more than one thread, the caller keeps the
// workers off the CPU it runs on (their affinity: the caller's allowed CPUs but its own, set
// again only when the caller's CPU changed).  Test hook: false gives the workers the caller's
// allowed CPUs back and leaves them there.
extern std::atomic<bool> worker_placement;

// Each worker's allowed CPUs (diagnostics; empty where the system has no affinity masks).
std::vector<std::vector<int>> worker_cpus();

// Test hook: false makes the one-row steps pack their weights as the other batch sizes do
// (reads_unpacked, gemm_kernels.h), to compare the two paths.
extern std::atomic<bool> unpacked_steps;

// The L2 cache of one core in bytes (sysconf; 0 where the system does not say): whether a
// packed matrix stays in cache between steps (reads_unpacked).  Test hook: l2_cache_override
// ≥ 0 replaces the system's value (-1, the default: the system's).
int64_t l2_cache_bytes();
extern std::atomic<int64_t> l2_cache_override;

// Whether a matrix of `bytes` read every step stays in one core's L2 between steps: no larger
// than half of it (an unknown L2, 0, holds nothing).
inline bool fits_half_l2(int64_t bytes) { return 2 * bytes <= l2_cache_bytes(); }

// The multiply-adds of each step of a time loop that every thread of its team must get
// (cells.h loop_team_size).  Test hook: min_step_macs_per_thread (default
// kMinStepMacsPerThread); 0: every loop runs on as many threads as it has panels, however small.
constexpr int64_t kMinStepMacsPerThread = 128 * 1024;
extern std::atomic<int64_t> min_step_macs_per_thread;

// Jobs that asked for more than one thread and ran with all of them, and with fewer (a worker
// had not joined within the join window, or a small job ran alone beside cold workers):
// diagnostics.
extern std::atomic<int64_t> full_teams, short_teams;

// Diagnostics: LSTM and GRU forward loops that ran in batch slices (cells.h runs_in_slices).
extern std::atomic<int64_t> sliced_loops;

// 64-byte aligned workspace (never null; throws std::bad_alloc); large blocks are recycled
// across calls (workspace.cc).
void* workspace_alloc(size_t bytes);
void workspace_free(void* p);
void workspace_release_cached();  // frees the recycled blocks not in use

}  // namespace fusedrnn

// fusedrnn._native: the Python face of the native engine (called by fusedrnn/engines/native.py,
// which validates and allocates every array first: here only dtype and contiguity are checked,
// never shapes against each other).  The GIL is released while a kernel runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "dispatch.h"

namespace py = pybind11;

namespace fusedrnn {
namespace {

std::atomic<const EngineTable*> current_table{nullptr};

const EngineTable& table() { return *current_table.load(std::memory_order_acquire); }

void set_isa(const std::string& name) {
  const EngineTable* t = find_table(name);
  if (!t) {
    std::string known;
    for (const auto& n : supported_isas()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("instruction set '" + name + "' is not available on this CPU/build; "
                                "available: " + known);
  }
  current_table.store(t, std::memory_order_release);
}

// The dtype check of every array argument: NumPy's builtin descriptor by identity (a pointer
// compare; py::array_t's own check goes through NumPy's casting tables, ~100 cache lines of
// code per call), else NumPy's equivalence (an unpickled array's dtype is a distinct, equal object).
template <class T>
bool has_dtype(const py::object& o) {
  if (!py::isinstance<py::array>(o)) return false;
  static PyObject* const builtin = py::dtype::of<T>().release().ptr();
  return py::detail::array_proxy(o.ptr())->descr == builtin || py::isinstance<py::array_t<T>>(o);
}

template <class T>
py::array_t<T> checked(const py::object& o, const char* name) {
  if (!has_dtype<T>(o))
    throw py::type_error(std::string(name) + " must be a numpy array of the compute dtype");
  auto a = py::reinterpret_borrow<py::array_t<T>>(o);
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(name) + " must be C-contiguous");
  return a;
}

template <class T>
const T* in(const py::object& o, const char* name) {
  if (o.is_none()) return nullptr;
  return checked<T>(o, name).data();
}

template <class T>
T* out(const py::object& o, const char* name) {
  if (o.is_none()) return nullptr;
  auto a = checked<T>(o, name);
  if (!a.writeable()) throw py::value_error(std::string(name) + " must be writeable");
  return a.mutable_data();
}

const uint8_t* mask(const py::object& o) {
  if (o.is_none()) return nullptr;
  auto a = py::reinterpret_borrow<py::array>(o);
  if (a.dtype().itemsize() != 1 || !(a.flags() & py::array::c_style))
    throw py::type_error("valid must be a C-contiguous bool/uint8 array");
  return static_cast<const uint8_t*>(a.data());
}

// A 2-D array of the compute dtype with any element strides (a transposed view is fine).
template <class T>
StridedMatrix<T> strided(const py::object& o, const char* name) {
  if (!has_dtype<T>(o))
    throw py::type_error(std::string(name) + " must be a numpy array of the compute dtype");
  auto a = py::reinterpret_borrow<py::array>(o);
  if (a.ndim() != 2 || a.strides(0) % ssize_t(sizeof(T)) || a.strides(1) % ssize_t(sizeof(T)))
    throw py::value_error(std::string(name) + " must be a 2-D array with whole-element strides");
  return {static_cast<const T*>(a.data()), int64_t(a.strides(0) / ssize_t(sizeof(T))),
          int64_t(a.strides(1) / ssize_t(sizeof(T)))};
}

bool is_double(const py::object& o) {
  // dtype equivalence, not identity: an unpickled array's dtype is a distinct but equal object
  if (has_dtype<double>(o)) return true;
  if (has_dtype<float>(o)) return false;
  throw py::type_error("the native engine computes in float32 or float64");
}

int64_t dim(const py::object& o, int axis) { return py::reinterpret_borrow<py::array>(o).shape(axis); }

// The input of a forward time loop: its projection x_gates, or x and W to compute it in the loop.
template <class T, class Args>
void set_input(Args& a, const py::object& x_gates, const py::object& x, const py::object& w_in) {
  a.x_gates = in<T>(x_gates, "x_gates");
  a.x = in<T>(x, "x");
  if (!w_in.is_none()) a.w_in = strided<T>(w_in, "w_in");
  a.inputs = x.is_none() ? 0 : dim(x, 2);
}

template <class T>
void lstm_forward(py::object x_gates, py::object x, py::object w_in, py::object bias,
                  py::object gate_scale, py::object w_rec, py::object peep, py::object w_proj,
                  py::object valid, double cell_clip, bool keep_trace, py::object gates,
                  py::object c, py::object co, py::object h, int threads, py::object gate_blocks) {
  LstmForwardArgs<T> a{};
  int64_t blocks[4];
  if (!gate_blocks.is_none()) {
    const auto order = gate_blocks.cast<std::vector<int64_t>>();
    if (order.size() != 4) throw std::invalid_argument("gate_blocks: 4 column blocks expected");
    for (int g = 0; g < 4; ++g) {
      if (order[g] < 0 || order[g] > 3) throw std::invalid_argument("gate_blocks: blocks are 0..3");
      blocks[g] = order[g];
    }
    a.gate_blocks = blocks;
  }
  a.steps = dim(h, 0) - 1; a.batch = dim(h, 1); a.units = dim(c, 2); a.out_units = dim(h, 2);
  set_input<T>(a, x_gates, x, w_in);
  a.bias = in<T>(bias, "bias");
  a.gate_scale = in<T>(gate_scale, "gate_scale");
  a.w_rec = strided<T>(w_rec, "w_rec");
  a.peep = in<T>(peep, "peep");
  a.w_proj = in<T>(w_proj, "w_proj");
  a.valid = mask(valid);
  a.cell_clip = T(cell_clip);
  a.keep_trace = keep_trace;
  if (py::isinstance<py::tuple>(gates)) {  // (i, f, c', o) planes
    const auto planes = gates.cast<py::tuple>();
    if (planes.size() != 4) throw std::invalid_argument("gates: 4 planes expected");
    for (int k = 0; k < 4; ++k) a.gate_planes[k] = out<T>(planes[k], "gates");
  } else {
    a.gates = out<T>(gates, "gates");
  }
  a.c = out<T>(c, "c"); a.co = out<T>(co, "co");
  a.h = out<T>(h, "h");
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.lstm_forward_f(a, threads); else t.lstm_forward_d(a, threads);
}

template <class T>
void lstm_backward(py::object gates, py::object c, py::object co, py::object h, py::object w_rec,
                   py::object peep, py::object w_proj, py::object dh_steps, py::object dc_steps,
                   py::object valid, py::object d_gates, py::object dh_total, py::object dh,
                   py::object dc, int threads) {
  const bool planes = py::isinstance<py::tuple>(gates);  // (i, f, c', o) planes
  const py::object first = planes ? py::object(gates.cast<py::tuple>()[0]) : gates;
  LstmBackwardArgs<T> a{dim(first, 0), dim(first, 1), dim(c, 2), dim(h, 2),
                        planes ? nullptr : in<T>(gates, "gates"), in<T>(c, "c"), in<T>(co, "co"), in<T>(h, "h"),
                        strided<T>(w_rec, "w_rec"), in<T>(peep, "peep"), in<T>(w_proj, "w_proj"),
                        in<T>(dh_steps, "dh_steps"), in<T>(dc_steps, "dc_steps"), mask(valid),
                        out<T>(d_gates, "d_gates"), out<T>(dh_total, "dh_total"), out<T>(dh, "dh"),
                        out<T>(dc, "dc"), {}, 0};
  if (planes) {
    const auto tuple = gates.cast<py::tuple>();
    if (tuple.size() != 4) throw std::invalid_argument("gates: 4 planes expected");
    for (int k = 0; k < 4; ++k) a.gate_planes[k] = in<T>(tuple[k], "gates");
  }
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.lstm_backward_f(a, threads); else t.lstm_backward_d(a, threads);
}

template <class T>
void gru_forward(py::object x_gates, py::object x, py::object w_in, py::object b_in,
                 py::object w_rec, py::object b_rec, py::object valid, py::object gates,
                 py::object q_h, py::object h, int threads) {
  GruForwardArgs<T> a{};
  a.steps = dim(h, 0) - 1; a.batch = dim(h, 1); a.units = dim(h, 2);
  set_input<T>(a, x_gates, x, w_in);
  a.bias_in = in<T>(b_in, "b_in");
  a.w_rec = strided<T>(w_rec, "w_rec");
  a.b_rec = in<T>(b_rec, "b_rec");
  a.valid = mask(valid);
  a.gates = out<T>(gates, "gates"); a.q_h = out<T>(q_h, "q_h"); a.h = out<T>(h, "h");
  a.keep_trace = dim(gates, 0) == a.steps;  // else one step (inference)
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.gru_forward_f(a, threads); else t.gru_forward_d(a, threads);
}

template <class T>
void gru_backward(py::object gates, py::object q_h, py::object h, py::object w_rec,
                  py::object dh_steps, py::object valid, py::object d_a, py::object d_q,
                  py::object dh, int threads) {
  GruBackwardArgs<T> a{dim(gates, 0), dim(gates, 1), dim(h, 2), in<T>(gates, "gates"),
                       in<T>(q_h, "q_h"), in<T>(h, "h"), strided<T>(w_rec, "w_rec"),
                       in<T>(dh_steps, "dh_steps"), mask(valid), out<T>(d_a, "d_a"),
                       out<T>(d_q, "d_q"), out<T>(dh, "dh"), 0};
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.gru_backward_f(a, threads); else t.gru_backward_d(a, threads);
}

template <class T>
void rnn_forward(py::object x_gates, py::object x, py::object w_in, py::object bias,
                 py::object w_rec, bool relu, py::object valid, py::object h, int threads) {
  RnnForwardArgs<T> a{};
  a.steps = dim(h, 0) - 1; a.batch = dim(h, 1); a.units = dim(h, 2);
  set_input<T>(a, x_gates, x, w_in);
  a.bias = in<T>(bias, "bias");
  a.w_rec = strided<T>(w_rec, "w_rec");
  a.relu = relu;
  a.valid = mask(valid);
  a.h = out<T>(h, "h");
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.rnn_forward_f(a, threads); else t.rnn_forward_d(a, threads);
}

template <class T>
void rnn_backward(py::object h, py::object w_rec, bool relu, py::object dh_steps, py::object valid,
                  py::object d_pre, py::object dh, int threads) {
  RnnBackwardArgs<T> a{dim(h, 0) - 1, dim(h, 1), dim(h, 2), in<T>(h, "h"),
                       strided<T>(w_rec, "w_rec"), relu, in<T>(dh_steps, "dh_steps"), mask(valid),
                       out<T>(d_pre, "d_pre"), out<T>(dh, "dh")};
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.rnn_backward_f(a, threads); else t.rnn_backward_d(a, threads);
}

template <class T>
py::array_t<T> tanh_hook(py::array_t<T, py::array::c_style | py::array::forcecast> x) {
  py::array_t<T> y(x.request().shape);
  const EngineTable& t = table();
  const int64_t n = x.size();
  const T* src = x.data();
  T* dst = y.mutable_data();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.tanh_f(src, dst, n); else t.tanh_d(src, dst, n);
  return y;
}

template <class T>
py::array_t<T> gemm_hook(py::array_t<T, py::array::c_style | py::array::forcecast> A,
                         py::array_t<T, py::array::c_style | py::array::forcecast> B,
                         int64_t repeats) {
  if (A.ndim() != 2 || B.ndim() != 2 || A.shape(1) != B.shape(0))
    throw py::value_error("gemm needs A [M, K] and B [K, N]");
  py::array_t<T> C({A.shape(0), B.shape(1)});
  const EngineTable& t = table();
  const int64_t M = A.shape(0), K = A.shape(1), N = B.shape(1);
  const T *a = A.data(), *b = B.data();
  T* c = C.mutable_data();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.step_gemm_f(M, K, N, a, b, c, repeats); else t.step_gemm_d(M, K, N, a, b, c, repeats);
  return C;
}

// A row list of a gathered GEMM (None: none): a C-contiguous int64 array, strictly increasing,
// within [0, rows) (the kernels read and write through it unchecked).
const int64_t* row_list(const py::object& o, int64_t rows, const char* name) {
  if (o.is_none()) return nullptr;
  auto a = py::reinterpret_borrow<py::array>(o);
  if (!py::isinstance<py::array_t<int64_t>>(o) || a.ndim() != 1 || !(a.flags() & py::array::c_style))
    throw py::type_error(std::string(name) + " must be a C-contiguous 1-D int64 array");
  const int64_t* r = static_cast<const int64_t*>(a.data());
  for (ssize_t i = 0; i < a.shape(0); ++i)
    if (r[i] < 0 || r[i] >= rows || (i > 0 && r[i] <= r[i - 1]))
      throw py::value_error(std::string(name) + " must be strictly increasing within [0, " +
                            std::to_string(rows) + ")");
  return r;
}

// C = op(A) op(B) on the team; op = transpose where asked (A, B, C C-contiguous 2-D arrays of
// one dtype; the Python side checks the shapes).  k_rows: the sum runs over those rows of A
// (transposed) and B only; m_rows: C's rows m_rows[i] = A's rows m_rows[i] · B only (A not
// transposed, not accurate); the other rows of C are left as they are.
template <class T>
void gemm(py::object A, py::object B, py::object C, bool transpose_a, bool transpose_b,
          bool accurate, int threads, py::object k_rows, py::object m_rows) {
  const int64_t a0 = dim(A, 0), a1 = dim(A, 1), b0 = dim(B, 0), b1 = dim(B, 1);
  int64_t M = transpose_a ? a1 : a0, K = transpose_a ? a0 : a1;
  const int64_t N = transpose_b ? b0 : b1;
  if (!k_rows.is_none() && (!transpose_a || transpose_b))
    throw py::value_error("k_rows needs a transposed A and an untransposed B");
  if (!m_rows.is_none() && (transpose_a || accurate))
    throw py::value_error("m_rows needs an untransposed A and accurate=False");
  const int64_t* k_list = row_list(k_rows, K, "k_rows");
  const int64_t* m_list = row_list(m_rows, M, "m_rows");
  if (!k_rows.is_none()) K = int64_t(py::len(k_rows));  // an empty list: no rows
  if (!m_rows.is_none()) M = int64_t(py::len(m_rows));
  GemmArgs<T> g{M, N, K, in<T>(A, "A"), transpose_a ? 1 : a1, transpose_a ? a1 : 1,
                in<T>(B, "B"), transpose_b ? 1 : b1, transpose_b ? b1 : 1,
                out<T>(C, "C"), N, accurate, k_list, m_list};
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.gemm_f(g, threads); else t.gemm_d(g, threads);
}

// dst[...] = src for two 2-D arrays of one shape and dtype with any strides (the table's copy:
// a transposing copy in register tiles; NumPy's strided copy of a transposed matrix runs at
// about 1 GB/s).  An exact copy: results never depend on it.
template <class T>
void copy_2d(py::array dst, py::array src) {
  const ssize_t item = ssize_t(sizeof(T));
  T* d = static_cast<T*>(dst.mutable_data());
  const T* s = static_cast<const T*>(src.data());
  const int64_t rows = dst.shape(0), cols = dst.shape(1);
  const int64_t drs = dst.strides(0) / item, dcs = dst.strides(1) / item;
  const int64_t srs = src.strides(0) / item, scs = src.strides(1) / item;
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.copy_f(rows, cols, s, srs, scs, d, drs, dcs);
  else t.copy_d(rows, cols, s, srs, scs, d, drs, dcs);
}

// A 1-D array with contiguous elements, or a 2-D one with contiguous rows (any whole-element,
// non-negative row stride); a stride along an axis of length 1 is never used.
bool rows_contiguous(const py::array& a) {
  const ssize_t item = a.itemsize(), last = a.ndim() - 1;
  if (a.shape(last) >= 2 && a.strides(last) != item) return false;
  return last == 0 || a.shape(0) < 2 || (a.strides(0) >= 0 && a.strides(0) % item == 0);
}

// The row stride of such a 2-D array, in elements (0 for a single row).
template <class T>
int64_t row_stride(const py::array& a) {
  return a.shape(0) > 1 ? a.strides(0) / ssize_t(sizeof(T)) : 0;
}

// out[c] = Σ_r a[r, c] b[r, c] for a, b [rows, cols] with contiguous rows (any row stride):
// float64 sums in row order.
template <class T>
void product_sum(py::array a, py::array b, py::array out) {
  const int64_t rows = a.shape(0), cols = a.shape(1);
  const T* pa = static_cast<const T*>(a.data());
  const T* pb = static_cast<const T*>(b.data());
  T* po = static_cast<T*>(out.mutable_data());
  const int64_t a_rs = row_stride<T>(a), b_rs = row_stride<T>(b);
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.product_sum_f(rows, cols, pa, a_rs, pb, b_rs, po);
  else t.product_sum_d(rows, cols, pa, a_rs, pb, b_rs, po);
}

// out[c] = Σ_r a[r, c] for a [rows, cols] with contiguous rows (any row stride): the order of
// common.py column_sum.
template <class T>
void column_sum(py::array a, py::array out) {
  const int64_t rows = a.shape(0), cols = a.shape(1);
  const T* pa = static_cast<const T*>(a.data());
  T* po = static_cast<T*>(out.mutable_data());
  const int64_t a_rs = row_stride<T>(a);
  const EngineTable& t = table();
  py::gil_scoped_release release;
  if constexpr (std::is_same<T, float>::value) t.column_sum_f(rows, cols, pa, a_rs, po);
  else t.column_sum_d(rows, cols, pa, a_rs, po);
}

// out[i, j, :] = src[i, index[j], :]: src [outer, inner, n] with contiguous rows (strides of its
// first two axes: any non-negative multiples of the itemsize), out C-contiguous [outer, count, n]
// of src's dtype.  Every index is checked here (the copies do not check).
void gather(py::array src, py::array_t<int64_t, py::array::c_style | py::array::forcecast> index,
            py::array out, int threads) {
  const int64_t item = int64_t(src.itemsize());
  const int64_t outer = src.ndim() == 3 ? src.shape(0) : 0, inner = src.ndim() == 3 ? src.shape(1) : 0;
  const int64_t count = index.ndim() == 1 ? index.shape(0) : -1;
  if (src.ndim() != 3 || out.ndim() != 3 || count < 0 || !src.dtype().is(out.dtype()) ||
      out.shape(0) != outer || out.shape(1) != count || out.shape(2) != src.shape(2) ||
      !out.writeable() || !(out.flags() & py::array::c_style))
    throw py::value_error("gather needs src [outer, inner, n], index [count] and a writeable "
                          "C-contiguous out [outer, count, n] of src's dtype");
  if ((src.shape(2) > 1 && src.strides(2) != item) || src.strides(0) < 0 || src.strides(1) < 0 ||
      src.strides(0) % item || src.strides(1) % item)
    throw py::value_error("gather needs src rows contiguous and non-negative strides");
  const int64_t* ix = index.data();
  for (int64_t j = 0; j < count; ++j)
    if (ix[j] < 0 || ix[j] >= inner) throw py::index_error("gather: index out of range");
  const char* from = static_cast<const char*>(src.data());
  char* to = static_cast<char*>(out.mutable_data());
  const int64_t outer_stride = src.strides(0), inner_stride = src.strides(1);
  const int64_t row_bytes = src.shape(2) * item;
  py::gil_scoped_release release;
  gather_rows(from, outer, outer_stride, inner_stride, ix, count, row_bytes, to, threads);
}

}  // namespace
}  // namespace fusedrnn

PYBIND11_MODULE(_native, m) {
  using namespace fusedrnn;
  m.doc() = "fusedrnn's native time-loop engine (see fusedrnn/engines/native.py)";
  current_table.store(find_table(supported_isas().front()));

  m.def("supported_isas", &supported_isas, "Instruction sets usable here, best first.");
  m.def("isa", [] { return std::string(table().name); }, "The instruction set in use.");
  m.def("set_isa", &set_isa, py::arg("name"));
  m.def("wake_team", &wake_team,
        "The team's sleeping workers start waking up: call it before the set-up work of a call "
        "whose native jobs follow (waking a halted vCPU can take milliseconds).");
  m.def("team_stats", [] {
    return py::make_tuple(full_teams.load(), short_teams.load());
  }, "(jobs that ran with every thread asked for, jobs that ran with fewer): diagnostics.");
  m.def("worker_cpus", &worker_cpus,
        "Each team worker's allowed CPUs (diagnostics: a job on several threads keeps the "
        "workers off the CPU its caller runs on).");
  m.def("set_worker_placement",
        [](bool on) { worker_placement.store(on, std::memory_order_relaxed); },
        py::arg("on"),
        "Test hook: False gives the workers the caller's allowed CPUs back at the next job and "
        "leaves them there; True (default): each job keeps them off its caller's CPU.");
  m.def("sliced_loops", [] { return sliced_loops.load(); },
        "LSTM and GRU forward loops that ran in batch slices, one per thread: diagnostics.");
  m.def("set_join_delay", [](double seconds) { set_join_delay_ns(int64_t(seconds * 1e9)); },
        py::arg("seconds"),
        "Test hook: workers wait this long before they join a time loop (late workers); 0: off.");
  m.def("set_unpacked_steps", [](bool on) { unpacked_steps.store(on, std::memory_order_relaxed); },
        py::arg("on"),
        "Test hook: False packs the weights of one-row (B = 1) steps too; True (default): read "
        "where they lie.");
  m.def("l2_cache_bytes", &l2_cache_bytes,
        "One core's L2 cache in bytes as the engine sees it (0: unknown): a one-row step reads R "
        "in place only when it is larger than half of it.");
  m.def("set_l2_cache_bytes",
        [](int64_t bytes) { l2_cache_override.store(bytes < 0 ? -1 : bytes, std::memory_order_relaxed); },
        py::arg("bytes"),
        "Test hook: the L2 size the one-row rule assumes (0: every R of depth >= 256 is read in "
        "place); -1 (default): the system's.");
  m.def("set_min_step_macs_per_thread",
        [](int64_t macs) { min_step_macs_per_thread.store(macs < 0 ? kMinStepMacsPerThread : macs,
                                                          std::memory_order_relaxed); },
        py::arg("macs"),
        "Test hook: the multiply-adds of a time loop's step each thread of its team must get "
        "(a smaller loop runs on fewer threads); 0: every loop on the whole team; -1: the default.");
  m.def("min_step_macs_per_thread", [] { return min_step_macs_per_thread.load(); },
        "The multiply-adds of a time loop's step each thread of its team must get.");
  m.def("release_cached_workspaces", &workspace_release_cached,
        "Frees the kernels' recycled workspace blocks that no call is using.");
  m.def("panel_width", [](int itemsize) {
    return itemsize == 8 ? table().panel_width_double : table().panel_width_float;
  }, py::arg("itemsize"), "NR of the packed GEMM panels (values) for the current ISA.");

  m.def("lstm_forward", [](py::object x_gates, py::object x, py::object w_in, py::object bias,
                           py::object gate_scale, py::object w_rec, py::object peep,
                           py::object w_proj, py::object valid, double clip, bool keep_trace,
                           py::object gates, py::object c, py::object co, py::object h,
                           int threads, py::object gate_blocks) {
    (is_double(h) ? lstm_forward<double> : lstm_forward<float>)(
        x_gates, x, w_in, bias, gate_scale, w_rec, peep, w_proj, valid, clip, keep_trace, gates,
        c, co, h, threads, gate_blocks);
  });
  m.def("lstm_backward", [](py::object gates, py::object c, py::object co, py::object h,
                            py::object w_rec, py::object peep, py::object w_proj,
                            py::object dh_steps, py::object dc_steps, py::object valid,
                            py::object d_gates, py::object dh_total, py::object dh, py::object dc,
                            int threads) {
    (is_double(c) ? lstm_backward<double> : lstm_backward<float>)(
        gates, c, co, h, w_rec, peep, w_proj, dh_steps, dc_steps, valid, d_gates, dh_total, dh,
        dc, threads);
  });
  m.def("gru_forward", [](py::object x_gates, py::object x, py::object w_in, py::object b_in,
                          py::object w_rec, py::object b_rec, py::object valid, py::object gates,
                          py::object q_h, py::object h, int threads) {
    (is_double(h) ? gru_forward<double> : gru_forward<float>)(
        x_gates, x, w_in, b_in, w_rec, b_rec, valid, gates, q_h, h, threads);
  });
  m.def("gru_backward", [](py::object gates, py::object q_h, py::object h, py::object w_rec,
                           py::object dh_steps, py::object valid, py::object d_a, py::object d_q,
                           py::object dh, int threads) {
    (is_double(gates) ? gru_backward<double> : gru_backward<float>)(
        gates, q_h, h, w_rec, dh_steps, valid, d_a, d_q, dh, threads);
  });
  m.def("rnn_forward", [](py::object x_gates, py::object x, py::object w_in, py::object bias,
                          py::object w_rec, bool relu, py::object valid, py::object h,
                          int threads) {
    (is_double(h) ? rnn_forward<double> : rnn_forward<float>)(x_gates, x, w_in, bias, w_rec, relu,
                                                              valid, h, threads);
  });
  m.def("rnn_backward", [](py::object h, py::object w_rec, bool relu, py::object dh_steps,
                           py::object valid, py::object d_pre, py::object dh, int threads) {
    (is_double(h) ? rnn_backward<double> : rnn_backward<float>)(h, w_rec, relu, dh_steps, valid,
                                                                d_pre, dh, threads);
  });
  m.def("gemm", [](py::object A, py::object B, py::object C, bool transpose_a, bool transpose_b,
                   bool accurate, int threads, py::object k_rows, py::object m_rows) {
    (is_double(C) ? gemm<double> : gemm<float>)(A, B, C, transpose_a, transpose_b, accurate, threads,
                                                k_rows, m_rows);
  }, py::arg("A"), py::arg("B"), py::arg("C"), py::arg("transpose_a"), py::arg("transpose_b"),
     py::arg("accurate"), py::arg("threads"), py::arg("k_rows") = py::none(),
     py::arg("m_rows") = py::none(),
     "C = op(A) op(B) on the engine's team (op: transpose where asked); accurate: float32 sums "
     "over blocks of 64 k added in float64.  k_rows (int64, strictly increasing; A transposed): "
     "the sum over those rows of A and B only; m_rows (A not transposed, not accurate): C's rows "
     "m_rows = A's rows m_rows · op(B), C's other rows untouched.");
  m.def("copy_2d", [](py::array dst, py::array src) {
    if (dst.ndim() != 2 || src.ndim() != 2 || dst.shape(0) != src.shape(0) ||
        dst.shape(1) != src.shape(1) || !dst.dtype().is(src.dtype()) || !dst.writeable())
      throw py::value_error("copy_2d needs two 2-D arrays of one shape and dtype, dst writeable");
    const ssize_t item = dst.itemsize();
    for (int a = 0; a < 2; ++a)
      if (dst.strides(a) % item || src.strides(a) % item)
        throw py::value_error("copy_2d needs whole-element strides");
    if (has_dtype<float>(dst)) copy_2d<float>(dst, src);
    else if (has_dtype<double>(dst)) copy_2d<double>(dst, src);
    else throw py::type_error("copy_2d copies float32 or float64");
  }, py::arg("dst"), py::arg("src"), "dst[...] = src (2-D, any strides), tiled.");
  m.def("product_sum", [](py::array a, py::array b, py::array out) {
    if (a.ndim() != 2 || b.ndim() != 2 || out.ndim() != 1 || a.shape(0) != b.shape(0) ||
        a.shape(1) != b.shape(1) || out.shape(0) != a.shape(1) || !a.dtype().is(b.dtype()) ||
        !a.dtype().is(out.dtype()) || !out.writeable())
      throw py::value_error("product_sum needs a, b [rows, cols] and a writeable out [cols] of one dtype");
    if (!rows_contiguous(a) || !rows_contiguous(b) || !rows_contiguous(out))
      throw py::value_error("product_sum needs contiguous rows (whole-element, non-negative row strides)");
    if (has_dtype<float>(a)) product_sum<float>(a, b, out);
    else if (has_dtype<double>(a)) product_sum<double>(a, b, out);
    else throw py::type_error("product_sum sums float32 or float64");
  }, py::arg("a"), py::arg("b"), py::arg("out"),
     "out[c] = sum over rows of a[r, c] * b[r, c] (float64 sums in row order).");
  m.def("column_sum", [](py::array a, py::array out) {
    if (a.ndim() != 2 || out.ndim() != 1 || out.shape(0) != a.shape(1) ||
        !a.dtype().is(out.dtype()) || !out.writeable())
      throw py::value_error("column_sum needs a [rows, cols] and a writeable out [cols] of one dtype");
    if (!rows_contiguous(a) || !rows_contiguous(out))
      throw py::value_error("column_sum needs contiguous rows (whole-element, non-negative row strides)");
    if (has_dtype<float>(a)) column_sum<float>(a, out);
    else if (has_dtype<double>(a)) column_sum<double>(a, out);
    else throw py::type_error("column_sum sums float32 or float64");
  }, py::arg("a"), py::arg("out"),
     "out[c] = sum over rows of a[r, c], in the order of fusedrnn.engines.common.column_sum.");
  m.def("gather", &gather, py::arg("src"), py::arg("index"), py::arg("out"), py::arg("threads"),
        "out[i, j, :] = src[i, index[j], :] (the rows copied on the team; numpy.take along axis 1).");
  m.def("tanh_f32", &tanh_hook<float>, "Test hook: the engine's tanh over a float32 array.");
  m.def("tanh_f64", &tanh_hook<double>, "Test hook: the engine's tanh over a float64 array.");
  m.def("gemm_f32", &gemm_hook<float>, py::arg("A"), py::arg("B"), py::arg("repeats") = 1,
        "Test/benchmark hook: A @ B through the packed micro-kernel (B packed once, the product "
        "computed `repeats` times).");
  m.def("gemm_f64", &gemm_hook<double>, py::arg("A"), py::arg("B"), py::arg("repeats") = 1,
        "Test/benchmark hook: as gemm_f32 in float64.");
}

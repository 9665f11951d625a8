// The experiment of benchmarks/below_python.py: what a capture below Python would see and cost.
//
// A thread-local RecordFunction observer (the mechanism torch.profiler is built on) that keeps,
// for each aten op run outside another kept op and not decomposed by a CompositeImplicitAutograd
// kernel, its name and the shape, strides, offset and dtype of every tensor in and out: the
// per-op facts spiketrace's record keeps, without a Python dispatch mode. A library's own ops
// (SpikingJelly's sj_lif::forward) are looked into: a dispatch mode sees the aten ops their
// Python kernels run.
// Not part of the product: compiled on demand by the benchmark (torch.utils.cpp_extension).
#include <torch/extension.h>
#include <ATen/record_function.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct Row {
  int op;           // index into op_names
  int64_t tensors;  // tensors in and out; -1 where the call came without its inputs boxed
};

struct OpKind {
  int index;
  bool kept;  // an aten op with no CompositeImplicitAutograd kernel
};

thread_local int open_kept_ops = 0;
std::vector<Row> rows;
std::vector<int64_t> facts;  // shape, strides, offset and dtype of each kept tensor, flattened
std::unordered_map<std::string, OpKind> kinds;
std::vector<std::string> op_names;
at::CallbackHandle handle = 0;

struct Kept : at::ObserverContext {};

const OpKind& kind_of(const at::RecordFunction& fn) {
  std::string name = fn.name();
  auto found = kinds.find(name);
  if (found != kinds.end()) return found->second;
  bool kept = false;  // an autograd node, a user's range or a library's op: not kept
  auto op = fn.operator_name();
  if (op && op->name.rfind("aten::", 0) == 0) {
    auto entry = c10::Dispatcher::singleton().findOp(*op);
    kept = entry && !entry->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
  }
  op_names.push_back(name);
  return kinds.emplace(name, OpKind{static_cast<int>(op_names.size()) - 1, kept}).first->second;
}

void keep(const at::Tensor& t, Row& row) {
  if (!t.defined()) return;
  row.tensors++;
  for (auto s : t.sizes()) facts.push_back(s);
  for (auto s : t.strides()) facts.push_back(s);
  facts.push_back(t.storage_offset());
  facts.push_back(static_cast<int64_t>(t.scalar_type()));
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (open_kept_ops > 0) return nullptr;  // inside a kept op: its kernel's own calls
  const OpKind& kind = kind_of(fn);
  if (!kind.kept) return nullptr;
  Row row{kind.index, 0};
  try {
    for (const auto& v : fn.inputs()) {
      if (v.isTensor()) keep(v.toTensor(), row);
      else if (v.isTensorList()) for (const auto& t : v.toTensorList()) keep(t, row);
    }
  } catch (const c10::Error&) {
    row.tensors = -1;
  }
  rows.push_back(row);
  open_kept_ops++;
  return std::make_unique<Kept>();
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (context == nullptr) return;
  open_kept_ops--;
  Row& row = rows.back();
  for (const auto& v : fn.outputs())
    if (v.isTensor()) keep(v.toTensor(), row);
}

}  // namespace

void start() {
  TORCH_CHECK(handle == 0, "the observer is already on");
  rows.clear();
  facts.clear();
  handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_enter, on_exit).needsInputs(true).needsOutputs(true).scopes(
          {at::RecordScope::FUNCTION}));
}

// Stops observing; returns {op name: calls} of what it kept.
py::dict stop() {
  TORCH_CHECK(handle != 0, "the observer is not on");
  at::removeCallback(handle);
  handle = 0;
  std::unordered_map<int, int64_t> calls;
  for (const auto& row : rows) calls[row.op]++;
  py::dict counts;
  for (const auto& [op, n] : calls) counts[py::str(op_names[op])] = n;
  return counts;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("start", &start, "observe this thread's dispatcher ops");
  m.def("stop", &stop, "stop observing; {op name: calls} kept");
}

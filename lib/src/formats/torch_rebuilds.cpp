// The rebuild functions of tensors that are not one plain view of a storage, as TorchHooks reads them
// (torch/_utils.py, torch/_tensor.py, torch/nested/_internal/nested_tensor.py): meta tensors and
// wrapper subclasses without data, quantized tensors, sparse and nested tensors made of parts, tensor
// subclasses with Python attributes; and the dispatch over every rebuild function, which names the
// ones it does not know. Nothing here calls anything.
#include "ckpt/error.hpp"
#include "formats/torch_hooks.hpp"

namespace ckpt {

namespace {

using torch_values::int_tuple;
using torch_values::is_int;

// [2, 3]: as torch prints a size in its messages
std::string int_list_text(const std::vector<int64_t>& shape) {
    std::string out = "[";
    for (size_t n = 0; n < shape.size(); ++n) out.append(n ? ", " : "").append(std::to_string(shape[n]));
    return out + "]";
}

// A tensor's Python attributes as _rebuild_from_type_v2 and _rebuild_parameter_with_state save them:
// a dict, or (dict or None, slots dict). Anything with an entry counts.
bool has_attributes(const Value* state) {
    if (!state) return false;
    if (state->kind == ValueKind::dict) return state->dict_size() > 0;
    if (state->kind == ValueKind::tuple && state->items().size() == 2)
        return (state->items()[0]->kind == ValueKind::dict && state->items()[0]->dict_size() > 0) ||
               (state->items()[1]->kind == ValueKind::dict && state->items()[1]->dict_size() > 0);
    return false;
}

}  // namespace

const TensorInfo& TorchHooks::tensor_arg(const Value* made, const Value* v, const std::string& what) const {
    if (v->kind != ValueKind::tensor) bad(made, what + " is " + type_name(v) + ", not a tensor");
    return m_tensors[static_cast<size_t>(v->i())];
}

// quantizer_params: (torch.per_tensor_affine | per_tensor_symmetric, scale, zero_point), or
// (torch.per_channel_affine | per_channel_symmetric | per_channel_affine_float_qparams, scales, zero_points, axis)
// with scales and zero points as tensors (or lists).
void TorchHooks::quantization(const Value* made, const Value* p, TensorInfo& t) {
    auto bad_params = [&]() { bad(made, "_rebuild_qtensor: quantizer parameters " + repr(p, 120) + " are not understood"); };
    if (p->kind != ValueKind::tuple || p->items().empty() || p->items()[0]->kind != ValueKind::global || p->items()[0]->s() != "torch")
        bad_params();
    static constexpr std::string_view k_schemes[] = {"per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
                                                     "per_channel_symmetric", "per_channel_affine_float_qparams"};
    auto e = std::make_shared<TensorExtra>();
    for (std::string_view sch : k_schemes)
        if (p->items()[0]->s2 == sch) e->qscheme = sch;
    if (e->qscheme.empty()) bad(made, "_rebuild_qtensor: unknown quantization scheme torch." + std::string(p->items()[0]->s2));
    switch (t.dtype) {
        case DType::qint8: case DType::quint8: case DType::qint32: case DType::quint4x2: case DType::quint2x4: break;
        default: bad(made, "_rebuild_qtensor over a " + std::string(dtype_name(t.dtype)) + " storage, not a quantized one");
    }
    ValueSpan it = p->items();
    auto number = [](const Value* v) { return v->kind == ValueKind::floating ? v->f() : static_cast<double>(v->i()); };
    if (e->qscheme.substr(0, 11) == "per_tensor_") {
        if (it.size() != 3 || (it[1]->kind != ValueKind::floating && !is_int(it[1])) || !is_int(it[2])) bad_params();
        e->scale = number(it[1]);
        e->zero_point = it[2]->i();
    } else {
        if (it.size() != 4 || !is_int(it[3])) bad_params();
        e->axis = it[3]->i();
        if (e->axis < 0 || static_cast<size_t>(e->axis) >= t.shape.size())
            bad(made, "_rebuild_qtensor: per-channel axis " + std::to_string(e->axis) + " is not a dimension of the tensor");
        const char* names[] = {"scales", "zero_points"};
        for (int n = 0; n < 2; ++n) {
            const Value* v = it[1 + n];
            if (v->kind == ValueKind::tensor) e->parts.push_back({names[n], tensor_index(v)});
            else if (v->kind != ValueKind::list) bad_params();
        }
    }
    t.extra = std::move(e);
}

// _rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad)
// _rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, layout, device, requires_grad)
// Neither saves elements: the tensor is its dtype, shape and device.
Value* TorchHooks::rebuild_meta(Value* made, std::string_view name, ValueSpan a) {
    bool wrapper = name == "_rebuild_wrapper_subclass";
    size_t d = wrapper ? 1 : 0;
    if (a.size() < (wrapper ? 8u : 4u)) bad(made, std::string(name) + " with " + std::to_string(a.size()) + " arguments");
    TensorInfo t;
    t.rebuild = wrapper ? "torch._utils._rebuild_wrapper_subclass" : "torch._utils._rebuild_meta_tensor_no_storage";
    if (a[d]->kind != ValueKind::dtype) bad(made, std::string(name) + ": dtype argument is not a torch dtype");
    t.dtype = *dtype_from_name(a[d]->s2);
    if (!int_tuple(a[d + 1], t.shape) || !int_tuple(a[d + 2], t.stride))
        bad(made, std::string(name) + ": size or stride is not a tuple of ints");
    count_elements(made, name, t);
    const Value* rg = a[wrapper ? 7 : 3];
    t.requires_grad = is_int(rg) && rg->i() != 0;
    t.no_data = true;
    auto e = std::make_shared<TensorExtra>();
    e->device = "meta";
    if (wrapper) {
        if (is_int(a[4])) t.storage_offset = a[4]->i();
        if (a[0]->kind == ValueKind::global) t.subclass = m_arena.own(global_name(a[0]));
        if (a[5]->kind == ValueKind::global)
            if (auto l = layout_from_name(a[5]->s2)) t.layout = *l;
        const Value* dev = a[6];
        if (dev->kind == ValueKind::device) e->device = std::string(dev->s()) + (dev->i() >= 0 ? ":" + std::to_string(dev->i()) : "");
        else if (dev->kind == ValueKind::string) e->device = std::string(dev->s());
    }
    t.extra = std::move(e);
    return tensor_value(std::move(t), made);
}

// _rebuild_sparse_tensor(layout, data): data is (indices, values, size[, is_coalesced]) for
// sparse_coo, (compressed_indices, plain_indices, values, size) for sparse_csr/csc/bsr/bsc;
// _rebuild_sparse_csr_tensor(layout, data) of torch 1.10–1.13 is the latter for CSR.
Value* TorchHooks::rebuild_sparse(Value* made, std::string_view name, ValueSpan a) {
    std::string what = "torch._utils." + std::string(name);
    if (a.size() != 2 || a[1]->kind != ValueKind::tuple) bad(made, what + " with arguments " + repr(made->args(), 120));
    std::optional<Layout> layout;
    if (a[0]->kind == ValueKind::global) layout = layout_from_name(a[0]->s2);
    else if (a[0]->kind == ValueKind::string) layout = layout_from_name(a[0]->s());
    if (!layout || *layout == Layout::strided || *layout == Layout::jagged)
        bad(made, what + ": layout " + repr(a[0], 60) + " is not a sparse layout");
    ValueSpan d = a[1]->items();
    bool coo = *layout == Layout::sparse_coo;
    if (coo ? (d.size() != 3 && d.size() != 4) : d.size() != 4) bad(made, what + ": its data is " + repr(a[1], 120));
    static constexpr std::string_view k_names[][2] = {
        {"indices", ""}, {"crow_indices", "col_indices"}, {"ccol_indices", "row_indices"}, {"crow_indices", "col_indices"}, {"ccol_indices", "row_indices"}};
    auto e = std::make_shared<TensorExtra>();
    size_t n_index = coo ? 1 : 2;
    const auto& names = k_names[static_cast<int>(*layout) - static_cast<int>(Layout::sparse_coo)];
    for (size_t i = 0; i < n_index; ++i) {
        const TensorInfo& ix = tensor_arg(made, d[i], what + ": " + std::string(names[i]));
        if (ix.dtype != DType::int64 && ix.dtype != DType::int32) bad(made, what + ": " + std::string(names[i]) + " are not integers");
        e->parts.push_back({names[i], tensor_index(d[i])});
    }
    const TensorInfo& values = tensor_arg(made, d[n_index], what + ": values");
    e->parts.push_back({"values", tensor_index(d[n_index])});
    TensorInfo t;
    t.rebuild = name == "_rebuild_sparse_csr_tensor" ? "torch._utils._rebuild_sparse_csr_tensor" : "torch._utils._rebuild_sparse_tensor";
    t.dtype = values.dtype;
    t.layout = *layout;
    t.storage = values.storage;
    if (!int_tuple(d[n_index + 1], t.shape)) bad(made, what + ": size is " + repr(d[n_index + 1], 60));
    t.stride.assign(t.shape.size(), 0);
    count_elements(made, name, t);
    t.stride.clear();
    t.extent = 0;
    if (coo) {  // indices [sparse_dim, nnz], values [nnz, dense dims …]
        const TensorInfo& ix = m_tensors[e->parts[0].tensor];
        if (ix.shape.size() != 2 || values.shape.empty() || ix.shape[1] != values.shape[0] ||
            static_cast<size_t>(ix.shape[0]) + values.shape.size() - 1 != t.shape.size())
            bad(made, what + ": indices " + int_list_text(ix.shape) + " and values " + int_list_text(values.shape) + " do not make a tensor of " +
                          int_list_text(t.shape));
    }
    if (values.numel > t.numel && coo && d.size() == 4 && d[3]->kind == ValueKind::boolean && d[3]->i())
        bad(made, what + ": a coalesced tensor with more values than elements");
    e->coalesced_flag = coo && d.size() == 4;
    t.extra = std::move(e);
    return tensor_value(std::move(t), made);
}

// _rebuild_nested_tensor(buffer, sizes, strides, storage_offsets): each component is a view of the
// 1-d buffer; its shape, strides and offset are rows of the other three (read once the records can
// be: Checkpoint::Builder::resolve_components).
Value* TorchHooks::rebuild_nested(Value* made, ValueSpan a) {
    std::string what = "torch._utils._rebuild_nested_tensor";
    if (a.size() != 4) bad(made, what + " with " + std::to_string(a.size()) + " arguments");
    static constexpr std::string_view k_names[] = {"buffer", "sizes", "strides", "offsets"};
    auto e = std::make_shared<TensorExtra>();
    for (size_t i = 0; i < 4; ++i) {
        const TensorInfo& p = tensor_arg(made, a[i], what + ": " + std::string(k_names[i]));
        if (i > 0 && p.dtype != DType::int64) bad(made, what + ": " + std::string(k_names[i]) + " are not int64");
        e->parts.push_back({k_names[i], tensor_index(a[i])});
    }
    return nested_value(made, "torch._utils._rebuild_nested_tensor", Layout::nested, std::move(e), false);
}

// A nested tensor over its first part (the buffer, or values): its dtype and storage; its components
// are resolved once the records can be read.
Value* TorchHooks::nested_value(Value* made, std::string_view rebuild, Layout layout, std::shared_ptr<TensorExtra> e, bool requires_grad) {
    const TensorInfo& base = m_tensors[e->parts[0].tensor];
    TensorInfo t;
    t.rebuild = rebuild;
    t.dtype = base.dtype;
    t.layout = layout;
    t.storage = base.storage;
    t.numel = base.numel;
    t.requires_grad = requires_grad;
    t.extra = std::move(e);
    return tensor_value(std::move(t), made);
}

// torch.nested._internal.nested_tensor._rebuild_njt({"values", "offsets", "lengths", "_ragged_idx",
// "_metadata_cache", "requires_grad"}): a jagged tensor, components cut from `values` along its
// ragged dimension at `offsets` (and `lengths`, when it is not None).
Value* TorchHooks::rebuild_jagged(Value* made, const Value* kw) {
    std::string what = "torch.nested._internal.nested_tensor._rebuild_njt";
    if (kw->kind != ValueKind::dict) bad(made, what + " without a dict of arguments");
    const Value* values = kw->get("values");
    const Value* offsets = kw->get("offsets");
    if (!values || !offsets) bad(made, what + " without values or offsets");
    auto e = std::make_shared<TensorExtra>();
    const TensorInfo& v = tensor_arg(made, values, what + ": values");
    if (tensor_arg(made, offsets, what + ": offsets").dtype != DType::int64) bad(made, what + ": offsets are not int64");
    e->parts.push_back({"values", tensor_index(values)});
    e->parts.push_back({"offsets", tensor_index(offsets)});
    if (const Value* lengths = kw->get("lengths"); lengths && lengths->kind != ValueKind::none) {
        if (tensor_arg(made, lengths, what + ": lengths").dtype != DType::int64) bad(made, what + ": lengths are not int64");
        e->parts.push_back({"lengths", tensor_index(lengths)});
    }
    int64_t ragged = 1;
    if (const Value* r = kw->get("_ragged_idx"); r && is_int(r)) ragged = r->i();
    if (ragged < 1 || static_cast<size_t>(ragged) > v.shape.size())
        bad(made, what + ": ragged dimension " + std::to_string(ragged) + " does not fit values of " + int_list_text(v.shape));
    e->axis = ragged;
    const Value* rg = kw->get("requires_grad");
    return nested_value(made, "torch.nested._internal.nested_tensor._rebuild_njt", Layout::jagged, std::move(e), rg && is_int(rg) && rg->i());
}

// _rebuild_from_type_v2(func, new_type, args, state): func(*args) made a subclass instance whose
// Python attributes are `state` (a dict, or (dict, slots)); torch < 1.12's _rebuild_from_type(func,
// type, args, dict) the same. The attributes stay on the tensor's value (Value::state): they are
// shown under the tensor's key and written back as they were.
Value* TorchHooks::rebuild_from_type(Value* made, ValueSpan a) {
    if (a.size() < 3 || a[0]->kind != ValueKind::global || a[2]->kind != ValueKind::tuple) return nullptr;
    Value* inner = m_arena.make(ValueKind::object, made->offset);
    inner->set_callable(a[0]);
    inner->set_args(a[2]);
    Value* t = reduce(inner);
    if (!t || t->kind != ValueKind::tensor) return nullptr;
    TensorInfo info = m_tensors[tensor_index(t)];
    const Value* state = t->state;  // _rebuild_parameter_with_state's, for a Parameter subclass
    std::string sub = global_name(a[1]);
    if (sub == "torch.nn.parameter.Parameter") info.is_parameter = true;
    else if (sub != "torch.Tensor" && info.layout != Layout::jagged) info.subclass = m_arena.own(sub);
    Value* v = tensor_value(std::move(info), made);
    if (a.size() > 3 && m_tensors.back().layout != Layout::jagged) state = a[3];  // a jagged tensor's are its internals
    v->state = has_attributes(state) ? const_cast<Value*>(state) : nullptr;
    return v;
}

Value* TorchHooks::rebuild(Value* made, std::string_view mod, std::string_view name, ValueSpan a) {
    if (mod == "torch._utils") {
        if (name == "_rebuild_tensor" || name == "_rebuild_tensor_v2" || name == "_rebuild_tensor_v3" || name == "_rebuild_qtensor")
            return rebuild_tensor(made, name, a);
        if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state") {
            if (a.size() < 3 || a[0]->kind != ValueKind::tensor) bad(made, std::string(name) + " without a tensor");
            TensorInfo t = m_tensors[tensor_index(a[0])];
            t.is_parameter = true;
            t.requires_grad = is_int(a[1]) && a[1]->i() != 0;
            Value* v = tensor_value(std::move(t), made);
            if (name == "_rebuild_parameter_with_state" && a.size() > 3 && has_attributes(a[3])) v->state = a[3];
            return v;
        }
        if (name == "_rebuild_meta_tensor_no_storage" || name == "_rebuild_wrapper_subclass") return rebuild_meta(made, name, a);
        if (name == "_rebuild_sparse_tensor" || name == "_rebuild_sparse_csr_tensor") return rebuild_sparse(made, name, a);
        if (name == "_rebuild_nested_tensor") return rebuild_nested(made, a);
        if (name == "_rebuild_device_tensor_from_cpu_tensor") {
            // (data, dtype, device, requires_grad): a CPU tensor moved to `device` as `dtype`
            if (a.size() < 4 || a[0]->kind != ValueKind::tensor || a[1]->kind != ValueKind::dtype)
                bad(made, std::string(name) + " with arguments " + repr(made->args(), 120));
            TensorInfo t = m_tensors[tensor_index(a[0])];
            if (dtype_name(t.dtype) != a[1]->s2)
                throw Error(ErrorKind::unsupported, "", m_record + ": a tensor saved as " + std::string(dtype_name(t.dtype)) +
                                                           " to be cast to " + std::string(a[1]->s2) + " on loading is not read",
                            made->offset);
            t.requires_grad = is_int(a[3]) && a[3]->i() != 0;
            return tensor_value(std::move(t), made);
        }
    }
    if (mod == "torch._tensor" && (name == "_rebuild_from_type_v2" || name == "_rebuild_from_type"))
        return rebuild_from_type(made, a);
    if (mod == "torch.nested._internal.nested_tensor" && name == "_rebuild_njt") {
        if (a.size() != 1) bad(made, std::string(name) + " with " + std::to_string(a.size()) + " arguments");
        return rebuild_jagged(made, a[0]);
    }
    if (name.substr(0, 9) == "_rebuild_")  // a tensor this reader cannot make: say so, do not guess
        throw Error(ErrorKind::unsupported, "",
                    m_record + ": tensors rebuilt by " + std::string(mod) + "." + std::string(name) +
                        (name.find("numpy") != std::string_view::npos || name.find("xla") != std::string_view::npos
                             ? " (a device tensor saved as a numpy array) are not read"
                             : " are not read (an unknown rebuild function: a newer torch's?)"),
                    made->offset);
    return nullptr;
}

}  // namespace ckpt

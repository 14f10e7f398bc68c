#include "torch_hooks.hpp"

#include <charconv>

#include "ckpt/error.hpp"
#include "pickle_text.hpp"

namespace ckpt {

namespace {

bool is_int(const Value* v) { return v->kind == ValueKind::integer || v->kind == ValueKind::boolean; }

// Appends the decimal text of `v` (std::to_string makes a string of each number).
void append_int(std::string& out, int64_t v) {
    char buf[24];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// A tuple of ints (a torch.Size is a tuple too).
bool int_tuple(const Value* v, std::vector<int64_t>& out) {
    if (v->kind != ValueKind::tuple && v->kind != ValueKind::list) return false;
    out.clear();
    out.reserve(v->items.size());
    for (const Value* i : v->items) {
        if (i->kind != ValueKind::integer) return false;
        out.push_back(i->i);
    }
    return true;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string out = "[";
    for (size_t n = 0; n < shape.size(); ++n) append_int(out.append(n ? ", " : ""), shape[n]);
    return out + "]";
}

// A tensor's Python attributes as _rebuild_from_type_v2 and _rebuild_parameter_with_state save them:
// a dict, or (dict or None, slots dict). Anything with an entry counts.
bool has_attributes(const Value* state) {
    if (!state) return false;
    if (state->kind == ValueKind::dict) return state->dict_size() > 0;
    if (state->kind == ValueKind::tuple && state->items.size() == 2)
        return (state->items[0]->kind == ValueKind::dict && state->items[0]->dict_size() > 0) ||
               (state->items[1]->kind == ValueKind::dict && state->items[1]->dict_size() > 0);
    return false;
}

}  // namespace

void TorchHooks::bad(const Value* at, const std::string& what) const {
    throw Error(ErrorKind::corrupt, "", m_record + ": " + what, at->offset);
}

Value* TorchHooks::global(Value* g, std::string_view /*written*/) {
    std::string full = global_name(g);
    auto [it, fresh] = m_global_index.emplace(full, m_globals.size());
    if (fresh) {
        GlobalRef ref;
        ref.module = std::string(g->s);
        ref.name = std::string(g->s2);
        ref.cls = GlobalPolicy::standard().judge(g->s, g->s2).cls;
        ref.first_offset = g->offset;
        ref.record = m_record;
        m_globals.push_back(std::move(ref));
    }
    ++m_globals[it->second].count;

    if (g->s == "torch") {
        auto dt = dtype_from_name(g->s2);
        if (dt && dtype_name(*dt) == g->s2) {
            g->kind = ValueKind::dtype;  // the global just made becomes the dtype; s2 is its name
            g->s = {};
        }
    }
    return g;
}

Value* TorchHooks::persistent_load(Value* pid, uint64_t offset) {
    // ('storage', storage_class, key, location, numel)  — legacy files add view metadata.
    // Legacy files also save the class of each pickled nn.Module as ('module', class, file, source):
    // the class is what the pickle meant; its source code is never run (or read).
    if (pid->kind == ValueKind::tuple && pid->items.size() == 4 && pid->items[0]->kind == ValueKind::string &&
        pid->items[0]->s == "module" && pid->items[1]->kind == ValueKind::global)
        return pid->items[1];
    if (pid->kind != ValueKind::tuple || pid->items.size() < 5 ||
        pid->items[0]->kind != ValueKind::string || pid->items[0]->s != "storage")
        throw Error(ErrorKind::unsupported, "",
                    m_record + ": persistent id is not a torch storage reference: " + repr(pid, 80),
                    offset);
    const Value* cls = pid->items[1];
    const Value* key = pid->items[2];
    const Value* loc = pid->items[3];
    const Value* numel = pid->items[4];
    if (cls->kind != ValueKind::global || key->kind != ValueKind::string ||
        loc->kind != ValueKind::string || numel->kind != ValueKind::integer || numel->i < 0)
        throw Error(ErrorKind::corrupt, "", m_record + ": malformed storage reference " + repr(pid, 120),
                    offset);
    // torch < 0.4 saved storage slices: view_metadata (view_key, offset, size) names a slice of the
    // storage `key`, which is saved whole (its record is the key's).
    const Value* view = pid->items.size() >= 6 && pid->items[5]->kind != ValueKind::none ? pid->items[5] : nullptr;
    if (view && (view->kind != ValueKind::tuple || view->items.size() != 3 || view->items[0]->kind != ValueKind::string ||
                 view->items[1]->kind != ValueKind::integer || view->items[2]->kind != ValueKind::integer ||
                 view->items[1]->i < 0 || view->items[2]->i < 0))
        throw Error(ErrorKind::corrupt, "", m_record + ": malformed storage view " + repr(view, 120), offset);
    auto dt = dtype_from_storage_class(cls->s2);
    if (!dt || (cls->s != "torch" && cls->s != "torch.storage"))
        throw Error(ErrorKind::unsupported, "",
                    m_record + ": unknown storage class " + global_name(cls), offset);

    Value* root = storage_value(cls, key->s, loc->s, static_cast<uint64_t>(numel->i), *dt, offset);
    if (!view) return root;
    auto [it, fresh] = m_views.try_emplace(std::string(view->items[0]->s));
    if (!fresh) return it->second.value;
    StorageView& sv = it->second;
    sv.offset = static_cast<uint64_t>(view->items[1]->i);
    sv.numel = static_cast<uint64_t>(view->items[2]->i);
    const StorageInfo& whole = m_storages[static_cast<size_t>(root->i)];
    if (sv.offset > whole.numel || sv.numel > whole.numel - sv.offset)
        throw Error(ErrorKind::corrupt, "", m_record + ": storage view " + it->first + " (elements " + std::to_string(sv.offset) + "+" +
                                                std::to_string(sv.numel) + ") lies outside storage " + whole.key + " (" +
                                                std::to_string(whole.numel) + " elements)", offset);
    sv.value = m_arena.make(ValueKind::storage, offset);
    sv.value->i = root->i;
    sv.value->s = m_arena.own(std::string(dtype_name(whole.dtype)) + ", " + std::to_string(sv.numel) + " elements, key " + it->first +
                              ": elements " + std::to_string(sv.offset) + "–" + std::to_string(sv.offset + sv.numel) + " of storage " +
                              whole.key);
    m_view_of.emplace(sv.value, &sv);
    return sv.value;
}

Value* TorchHooks::storage_value(const Value* cls, std::string_view k, std::string_view location, uint64_t numel, DType dtype,
                                 uint64_t offset) {
    auto storage_key = [this](size_t pos) -> std::string_view { return m_storages[pos].key; };
    size_t known = m_storage_by_key.find(k, storage_key);
    if (known != StringIndex::npos) {
        const StorageInfo& s = m_storages[known];
        if (s.dtype != dtype || s.numel != numel)
            m_problems.push_back({"storage_conflict", std::string(k),
                                  "storage " + std::string(k) + " is referenced as " +
                                      std::string(dtype_name(s.dtype)) + "×" + std::to_string(s.numel) +
                                      " and as " + std::string(dtype_name(dtype)) + "×" +
                                      std::to_string(numel)});
        return m_storage_values[known];
    }
    StorageInfo s;
    s.key = k;
    s.dtype = dtype;
    s.numel = numel;
    s.location = std::string(location);
    if (cls != m_class_value) {  // one storage class for all of a file's storages, as a rule
        m_class_value = cls;
        m_class_name = m_arena.own(global_name(cls));
    }
    s.storage_class = m_class_name;
    if (!checked_mul(s.numel, dtype_size(s.dtype)))
        throw Error(ErrorKind::corrupt, "", m_record + ": storage " + std::string(k) + " size overflows", offset);
    Value* v = m_arena.make(ValueKind::storage, offset);  // the id tuple may sit in the memo: a new value
    v->i = static_cast<int64_t>(m_storages.size());
    std::string& text = m_scratch;  // one buffer for every storage's text: no allocation each
    text.assign(dtype_name(s.dtype)).append(", ");
    append_int(text, static_cast<int64_t>(s.numel));
    text.append(" elements, key ").append(k);
    v->s = m_arena.own(text);
    m_storage_by_key.insert(k, m_storages.size(), storage_key);
    m_storages.push_back(std::move(s));
    m_storage_values.resize(m_storages.size());
    m_storage_values.back() = v;
    return v;
}

Value* TorchHooks::retype(Value* made, ValueKind kind) {
    uint64_t offset = made->offset;
    *made = Value();
    made->kind = kind;
    made->offset = offset;
    return made;
}

Value* TorchHooks::tensor_value(TensorInfo info, Value* made) {
    Value* v = retype(made, ValueKind::tensor);
    v->i = static_cast<int64_t>(m_tensors.size());
    std::string& text = m_scratch;
    text.assign(dtype_name(info.dtype)).append("[");
    for (size_t n = 0; n < info.shape.size(); ++n) append_int(text.append(n ? ", " : ""), info.shape[n]);
    v->s = m_arena.own(text.append("]"));
    m_tensors.push_back(std::move(info));
    return v;
}

Value* TorchHooks::rebuild_tensor(Value* made, std::string_view name, const ValueList& a) {
    // _rebuild_tensor(storage, offset, size, stride)
    // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
    // _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
    // _rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad, backward_hooks)
    bool q = name == "_rebuild_qtensor";
    size_t need = name == "_rebuild_tensor" ? 4 : name == "_rebuild_tensor_v2" ? 6 : 7;
    TensorInfo t;
    t.rebuild = need == 4 ? "torch._utils._rebuild_tensor" : name == "_rebuild_tensor_v2" ? "torch._utils._rebuild_tensor_v2"
              : q         ? "torch._utils._rebuild_qtensor"
                          : "torch._utils._rebuild_tensor_v3";
    if (a.size() < need) bad(made, std::string(name) + " with " + std::to_string(a.size()) + " arguments");
    if (a[0]->kind != ValueKind::storage) bad(made, std::string(name) + " without a storage");
    t.storage = static_cast<size_t>(a[0]->i);
    const StorageInfo& st = m_storages[t.storage];
    t.dtype = st.dtype;
    if (!is_int(a[1]) || a[1]->i < 0) bad(made, std::string(name) + ": storage offset is not a non-negative int");
    t.storage_offset = a[1]->i;
    if (!int_tuple(a[2], t.shape) || !int_tuple(a[3], t.stride))
        bad(made, std::string(name) + ": size or stride is not a tuple of ints");
    if (need >= 6) {
        const Value* rg = a[q ? 5 : 4];
        if (rg->kind != ValueKind::boolean && rg->kind != ValueKind::integer)
            bad(made, std::string(name) + ": requires_grad is not a bool");
        t.requires_grad = rg->i != 0;
    }
    if (name == "_rebuild_tensor_v3") {
        if (a[6]->kind != ValueKind::dtype) bad(made, std::string(name) + ": dtype argument is not a torch dtype");
        auto dt = dtype_from_name(a[6]->s2);
        t.dtype = *dt;
        if (st.dtype != DType::untyped && st.dtype != t.dtype)
            bad(made, std::string(name) + ": dtype differs from its typed storage");
    } else if (st.dtype == DType::untyped) {
        bad(made, std::string(name) + " over an untyped storage (needs _rebuild_tensor_v3)");
    }
    count_elements(made, name, t);
    if (!m_view_of.empty())
        if (auto it = m_view_of.find(a[0]); it != m_view_of.end()) {  // a slice of torch < 0.4: offsets are the slice's
            const StorageView& v = *it->second;
            auto end = checked_add(static_cast<uint64_t>(t.storage_offset), t.extent);
            if (t.numel && (!end || *end > v.numel))
                bad(made, std::string(name) + ": the tensor runs past the end of its storage slice (" + std::to_string(v.numel) +
                              " elements)");
            t.storage_offset += static_cast<int64_t>(v.offset);
        }
    if (q) quantization(made, a[4], t);
    return tensor_value(std::move(t), made);
}

void TorchHooks::count_elements(const Value* made, std::string_view name, TensorInfo& t) const {
    if (t.shape.size() != t.stride.size()) bad(made, std::string(name) + ": size and stride differ in length");
    if (const char* why = t.count_elements()) bad(made, std::string(name) + ": " + why);
}

const TensorInfo& TorchHooks::tensor_arg(const Value* made, const Value* v, const std::string& what) const {
    if (v->kind != ValueKind::tensor) bad(made, what + " is " + type_name(v) + ", not a tensor");
    return m_tensors[static_cast<size_t>(v->i)];
}

// quantizer_params: (torch.per_tensor_affine | per_tensor_symmetric, scale, zero_point), or
// (torch.per_channel_affine | per_channel_symmetric | per_channel_affine_float_qparams, scales, zero_points, axis)
// with scales and zero points as tensors (or lists).
void TorchHooks::quantization(const Value* made, const Value* p, TensorInfo& t) {
    auto bad_params = [&]() { bad(made, "_rebuild_qtensor: quantizer parameters " + repr(p, 120) + " are not understood"); };
    if (p->kind != ValueKind::tuple || p->items.empty() || p->items[0]->kind != ValueKind::global || p->items[0]->s != "torch")
        bad_params();
    static constexpr std::string_view k_schemes[] = {"per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
                                                     "per_channel_symmetric", "per_channel_affine_float_qparams"};
    auto e = std::make_shared<TensorExtra>();
    for (std::string_view sch : k_schemes)
        if (p->items[0]->s2 == sch) e->qscheme = sch;
    if (e->qscheme.empty()) bad(made, "_rebuild_qtensor: unknown quantization scheme torch." + std::string(p->items[0]->s2));
    switch (t.dtype) {
        case DType::qint8: case DType::quint8: case DType::qint32: case DType::quint4x2: case DType::quint2x4: break;
        default: bad(made, "_rebuild_qtensor over a " + std::string(dtype_name(t.dtype)) + " storage, not a quantized one");
    }
    const ValueList& it = p->items;
    auto number = [](const Value* v) { return v->kind == ValueKind::floating ? v->f : static_cast<double>(v->i); };
    if (e->qscheme.substr(0, 11) == "per_tensor_") {
        if (it.size() != 3 || (it[1]->kind != ValueKind::floating && !is_int(it[1])) || !is_int(it[2])) bad_params();
        e->scale = number(it[1]);
        e->zero_point = it[2]->i;
    } else {
        if (it.size() != 4 || !is_int(it[3])) bad_params();
        e->axis = it[3]->i;
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
Value* TorchHooks::rebuild_meta(Value* made, std::string_view name, const ValueList& a) {
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
    t.requires_grad = is_int(rg) && rg->i != 0;
    t.no_data = true;
    auto e = std::make_shared<TensorExtra>();
    e->device = "meta";
    if (wrapper) {
        if (is_int(a[4])) t.storage_offset = a[4]->i;
        if (a[0]->kind == ValueKind::global) t.subclass = global_name(a[0]);
        if (a[5]->kind == ValueKind::global)
            if (auto l = layout_from_name(a[5]->s2)) t.layout = *l;
        const Value* dev = a[6];
        if (dev->kind == ValueKind::device) e->device = std::string(dev->s) + (dev->i >= 0 ? ":" + std::to_string(dev->i) : "");
        else if (dev->kind == ValueKind::string) e->device = std::string(dev->s);
    }
    t.extra = std::move(e);
    return tensor_value(std::move(t), made);
}

// _rebuild_sparse_tensor(layout, data): data is (indices, values, size[, is_coalesced]) for
// sparse_coo, (compressed_indices, plain_indices, values, size) for sparse_csr/csc/bsr/bsc;
// _rebuild_sparse_csr_tensor(layout, data) of torch 1.10–1.13 is the latter for CSR.
Value* TorchHooks::rebuild_sparse(Value* made, std::string_view name, const ValueList& a) {
    std::string what = "torch._utils." + std::string(name);
    if (a.size() != 2 || a[1]->kind != ValueKind::tuple) bad(made, what + " with arguments " + repr(made->args, 120));
    std::optional<Layout> layout;
    if (a[0]->kind == ValueKind::global) layout = layout_from_name(a[0]->s2);
    else if (a[0]->kind == ValueKind::string) layout = layout_from_name(a[0]->s);
    if (!layout || *layout == Layout::strided || *layout == Layout::jagged)
        bad(made, what + ": layout " + repr(a[0], 60) + " is not a sparse layout");
    const ValueList& d = a[1]->items;
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
            bad(made, what + ": indices " + shape_text(ix.shape) + " and values " + shape_text(values.shape) + " do not make a tensor of " +
                          shape_text(t.shape));
    }
    if (values.numel > t.numel && coo && d.size() == 4 && d[3]->kind == ValueKind::boolean && d[3]->i)
        bad(made, what + ": a coalesced tensor with more values than elements");
    e->coalesced_flag = coo && d.size() == 4;
    t.extra = std::move(e);
    return tensor_value(std::move(t), made);
}

// _rebuild_nested_tensor(buffer, sizes, strides, storage_offsets): each component is a view of the
// 1-d buffer; its shape, strides and offset are rows of the other three (read once the records can
// be: Checkpoint::Builder::resolve_components).
Value* TorchHooks::rebuild_nested(Value* made, const ValueList& a) {
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
    if (const Value* r = kw->get("_ragged_idx"); r && is_int(r)) ragged = r->i;
    if (ragged < 1 || static_cast<size_t>(ragged) > v.shape.size())
        bad(made, what + ": ragged dimension " + std::to_string(ragged) + " does not fit values of " + shape_text(v.shape));
    e->axis = ragged;
    const Value* rg = kw->get("requires_grad");
    return nested_value(made, "torch.nested._internal.nested_tensor._rebuild_njt", Layout::jagged, std::move(e), rg && is_int(rg) && rg->i);
}

// _rebuild_from_type_v2(func, new_type, args, state): func(*args) made a subclass instance whose
// Python attributes are `state` (a dict, or (dict, slots)); torch < 1.12's _rebuild_from_type(func,
// type, args, dict) the same. The attributes stay on the tensor's value (Value::state): they are
// shown under the tensor's key and written back as they were.
Value* TorchHooks::rebuild_from_type(Value* made, const ValueList& a) {
    if (a.size() < 3 || a[0]->kind != ValueKind::global || a[2]->kind != ValueKind::tuple) return nullptr;
    Value* inner = m_arena.make(ValueKind::object, made->offset);
    inner->callable = a[0];
    inner->args = a[2];
    Value* t = reduce(inner);
    if (!t || t->kind != ValueKind::tensor) return nullptr;
    TensorInfo info = m_tensors[tensor_index(t)];
    const Value* state = t->state;  // _rebuild_parameter_with_state's, for a Parameter subclass
    std::string sub = global_name(a[1]);
    if (sub == "torch.nn.parameter.Parameter") info.is_parameter = true;
    else if (sub != "torch.Tensor" && info.layout != Layout::jagged) info.subclass = sub;
    Value* v = tensor_value(std::move(info), made);
    if (a.size() > 3 && m_tensors.back().layout != Layout::jagged) state = a[3];  // a jagged tensor's are its internals
    v->state = has_attributes(state) ? const_cast<Value*>(state) : nullptr;
    return v;
}

Value* TorchHooks::rebuild(Value* made, std::string_view mod, std::string_view name, const ValueList& a) {
    if (mod == "torch._utils") {
        if (name == "_rebuild_tensor" || name == "_rebuild_tensor_v2" || name == "_rebuild_tensor_v3" || name == "_rebuild_qtensor")
            return rebuild_tensor(made, name, a);
        if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state") {
            if (a.size() < 3 || a[0]->kind != ValueKind::tensor) bad(made, std::string(name) + " without a tensor");
            TensorInfo t = m_tensors[tensor_index(a[0])];
            t.is_parameter = true;
            t.requires_grad = is_int(a[1]) && a[1]->i != 0;
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
                bad(made, std::string(name) + " with arguments " + repr(made->args, 120));
            TensorInfo t = m_tensors[tensor_index(a[0])];
            if (dtype_name(t.dtype) != a[1]->s2)
                throw Error(ErrorKind::unsupported, "", m_record + ": a tensor saved as " + std::string(dtype_name(t.dtype)) +
                                                           " to be cast to " + std::string(a[1]->s2) + " on loading is not read",
                            made->offset);
            t.requires_grad = is_int(a[3]) && a[3]->i != 0;
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

void TorchHooks::finish() {
    if (!m_methods.only_methods()) return;
    for (GlobalRef& g : m_globals)
        if (g.record == m_record && g.name == "getattr" && (g.module == "builtins" || g.module == "__builtins__")) {
            g.bound_methods = m_methods.only_methods();
            g.bound_method = m_methods.example();
            g.cls = GlobalClass::benign;
        }
}

Value* TorchHooks::reduce(Value* made) {
    m_methods.reduce(made);
    const Value* c = made->callable;
    if (c->kind != ValueKind::global) return nullptr;
    if (made->how == MakeHow::newobj)
        if (auto it = m_global_index.find(global_name(c)); it != m_global_index.end() && !m_globals[it->second].instantiated++)
            m_globals[it->second].first_instantiated = made->offset;
    std::string_view mod = c->s, name = c->s2;
    const ValueList& a = made->args->items;
    bool plain_call = made->how == MakeHow::reduce;

    if (mod == "collections" && name == "OrderedDict" && a.empty()) {
        Value* d = retype(made, ValueKind::dict);
        d->s2 = "collections.OrderedDict";
        return d;
    }
    if (plain_call && (mod == "torch._utils" || mod == "torch._tensor" || mod == "torch.nested._internal.nested_tensor"))
        if (Value* t = rebuild(made, mod, name, a)) return t;
    if (mod == "torch.serialization" && name == "_get_layout" && plain_call && a.size() == 1 && a[0]->kind == ValueKind::string) {
        // _get_layout("torch.sparse_coo") is the layout torch.sparse_coo: a global of that name
        std::string_view full = a[0]->s;
        if (full.substr(0, 6) != "torch." || !layout_from_name(full)) return nullptr;
        Value* g = retype(made, ValueKind::global);
        g->s = "torch";
        g->s2 = m_arena.own(full.substr(6));
        return g;
    }
    if (mod == "torch" && name == "Size" && a.size() == 1 && a[0]->kind == ValueKind::tuple) {
        const Value* sizes = a[0];
        Value* s = retype(made, ValueKind::tuple);
        s->items = sizes->items;
        s->depth = sizes->depth;
        s->s2 = "torch.Size";
        return s;
    }
    if (mod == "torch" && name == "device" && !a.empty() && a[0]->kind == ValueKind::string) {
        std::string_view type = a[0]->s;
        int64_t index = a.size() > 1 && a[1]->kind == ValueKind::integer ? a[1]->i : -1;
        Value* d = retype(made, ValueKind::device);
        d->i = index;
        size_t colon = type.find(':');
        if (colon != std::string_view::npos) {
            std::string idx(type.substr(colon + 1));
            d->i = std::atoll(idx.c_str());
            type = type.substr(0, colon);
        }
        d->s = type;
        return d;
    }
    if (mod == "builtins" && (name == "set" || name == "frozenset") && plain_call) {
        if (!a.empty() && a[0]->kind != ValueKind::list && a[0]->kind != ValueKind::tuple) return nullptr;
        const Value* from = a.empty() ? nullptr : a[0];
        Value* s = retype(made, name == "set" ? ValueKind::set : ValueKind::frozenset);
        if (from) {
            s->items = from->items;
            s->depth = from->depth;
        }
        return s;
    }
    if (mod == "builtins" && name == "complex" && plain_call && a.size() == 2 &&
        a[0]->kind == ValueKind::floating && a[1]->kind == ValueKind::floating) {
        double re = a[0]->f, im = a[1]->f;
        Value* z = retype(made, ValueKind::complex);
        z->f = re;
        z->f2 = im;
        return z;
    }
    if (mod == "_codecs" && name == "encode" && plain_call && !a.empty() &&
        a[0]->kind == ValueKind::string) {
        // protocol 2 writes bytes as _codecs.encode(text, 'latin1'): decode UTF-8 → Latin-1 bytes.
        std::string_view enc = a.size() > 1 && a[1]->kind == ValueKind::string ? a[1]->s : "utf-8";
        std::string out;
        if (!pickle_text::codecs_encode(a[0]->s, enc, out)) return nullptr;
        Value* b = retype(made, ValueKind::bytes);
        b->s = m_arena.own(std::move(out));
        return b;
    }
    if (mod == "builtins" && name == "bytearray" && plain_call && a.size() == 1 &&
        a[0]->kind == ValueKind::bytes) {
        std::string_view data = a[0]->s;
        Value* b = retype(made, ValueKind::bytearray);
        b->s = data;
        return b;
    }
    return nullptr;
}

}  // namespace ckpt

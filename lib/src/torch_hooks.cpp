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
    if (pid->items.size() >= 6 && pid->items[5]->kind != ValueKind::none)
        throw Error(ErrorKind::unsupported, "",
                    m_record + ": storage " + std::string(key->s) + " is a view of another storage (torch < 0.4), which is not read",
                    offset);
    auto dt = dtype_from_storage_class(cls->s2);
    if (!dt || (cls->s != "torch" && cls->s != "torch.storage"))
        throw Error(ErrorKind::unsupported, "",
                    m_record + ": unknown storage class " + global_name(cls), offset);

    std::string_view k = key->s;
    auto storage_key = [this](size_t pos) -> std::string_view { return m_storages[pos].key; };
    size_t known = m_storage_by_key.find(k, storage_key);
    if (known != StringIndex::npos) {
        const StorageInfo& s = m_storages[known];
        if (s.dtype != *dt || s.numel != static_cast<uint64_t>(numel->i))
            m_problems.push_back({"storage_conflict", std::string(k),
                                  "storage " + std::string(k) + " is referenced as " +
                                      std::string(dtype_name(s.dtype)) + "×" + std::to_string(s.numel) +
                                      " and as " + std::string(dtype_name(*dt)) + "×" +
                                      std::to_string(numel->i)});
        return m_storage_values[known];
    }
    StorageInfo s;
    s.key = k;
    s.dtype = *dt;
    s.numel = static_cast<uint64_t>(numel->i);
    s.location = std::string(loc->s);
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
    size_t need = name == "_rebuild_tensor" ? 4 : name == "_rebuild_tensor_v2" ? 6 : 7;
    TensorInfo t;
    t.rebuild = need == 4 ? "torch._utils._rebuild_tensor" : need == 6 ? "torch._utils._rebuild_tensor_v2"
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
    if (t.shape.size() != t.stride.size()) bad(made, std::string(name) + ": size and stride differ in length");
    if (need >= 6) {
        if (a[4]->kind != ValueKind::boolean && a[4]->kind != ValueKind::integer)
            bad(made, std::string(name) + ": requires_grad is not a bool");
        t.requires_grad = a[4]->i != 0;
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
    uint64_t numel = 1, extent = 1;
    for (size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] < 0 || t.stride[d] < 0) bad(made, std::string(name) + ": negative size or stride");
        auto n = checked_mul(numel, static_cast<uint64_t>(t.shape[d]));
        if (!n) bad(made, std::string(name) + ": element count overflows");
        numel = *n;
    }
    if (numel == 0) {
        extent = 0;
    } else {
        for (size_t d = 0; d < t.shape.size(); ++d) {
            auto span = checked_mul(static_cast<uint64_t>(t.shape[d] - 1), static_cast<uint64_t>(t.stride[d]));
            auto e = span ? checked_add(extent, *span) : std::nullopt;
            if (!e) bad(made, std::string(name) + ": tensor extent overflows");
            extent = *e;
        }
    }
    if (!checked_mul(numel, dtype_size(t.dtype))) bad(made, std::string(name) + ": byte size overflows");
    t.numel = numel;
    t.extent = extent;
    return tensor_value(std::move(t), made);
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
    std::string_view mod = c->s, name = c->s2;
    const ValueList& a = made->args->items;
    bool plain_call = made->how == MakeHow::reduce;

    if (mod == "collections" && name == "OrderedDict" && a.empty()) {
        Value* d = retype(made, ValueKind::dict);
        d->s2 = "collections.OrderedDict";
        return d;
    }
    if (mod == "torch._utils" && plain_call &&
        (name == "_rebuild_tensor" || name == "_rebuild_tensor_v2" || name == "_rebuild_tensor_v3"))
        return rebuild_tensor(made, name, a);
    if (mod == "torch._utils" && plain_call &&
        (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state")) {
        if (a.size() < 3 || a[0]->kind != ValueKind::tensor) bad(made, std::string(name) + " without a tensor");
        TensorInfo t = m_tensors[static_cast<size_t>(a[0]->i)];
        t.is_parameter = true;
        t.requires_grad = is_int(a[1]) && a[1]->i != 0;
        return tensor_value(std::move(t), made);
    }
    if (mod == "torch._tensor" && name == "_rebuild_from_type_v2" && plain_call && a.size() >= 3 &&
        a[0]->kind == ValueKind::global && a[2]->kind == ValueKind::tuple) {
        // _rebuild_from_type_v2(func, new_type, args, state): func(*args), then the subclass.
        Value* inner = m_arena.make(ValueKind::object, made->offset);
        inner->callable = a[0];
        inner->args = a[2];
        Value* t = reduce(inner);
        if (!t || t->kind != ValueKind::tensor) return nullptr;
        TensorInfo info = m_tensors[static_cast<size_t>(t->i)];
        std::string sub = global_name(a[1]);
        if (sub == "torch.nn.parameter.Parameter") info.is_parameter = true;
        else if (sub != "torch.Tensor") info.subclass = sub;
        return tensor_value(std::move(info), made);
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

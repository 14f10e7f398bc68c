#include "formats/torch_hooks.hpp"

#include <charconv>

#include "ckpt/error.hpp"
#include "pickle/pickle_text.hpp"

namespace ckpt {

using torch_values::int_tuple;
using torch_values::is_int;

namespace {

// Appends the decimal text of `v` (std::to_string makes a string of each number).
void append_int(std::string& out, int64_t v) {
    char buf[24];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
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
        ref.module = std::string(g->s());
        ref.name = std::string(g->s2);
        ref.cls = GlobalPolicy::standard().judge(g->s(), g->s2).cls;
        ref.first_offset = g->offset;
        ref.record = m_record;
        m_globals.push_back(std::move(ref));
    }
    ++m_globals[it->second].count;

    if (g->s() == "torch") {
        auto dt = dtype_from_name(g->s2);
        if (dt && dtype_name(*dt) == g->s2) {
            g->kind = ValueKind::dtype;  // the global just made becomes the dtype; s2 is its name (a dtype holds no s)
        }
    }
    return g;
}

Value* TorchHooks::persistent_load(Value* pid, uint64_t offset) {
    // ('storage', storage_class, key, location, numel)  — legacy files add view metadata.
    // Legacy files also save the class of each pickled nn.Module as ('module', class, file, source):
    // the class is what the pickle meant; its source code is never run (or read).
    if (pid->kind == ValueKind::tuple && pid->items().size() == 4 && pid->items()[0]->kind == ValueKind::string &&
        pid->items()[0]->s() == "module" && pid->items()[1]->kind == ValueKind::global)
        return pid->items()[1];
    if (pid->kind != ValueKind::tuple || pid->items().size() < 5 ||
        pid->items()[0]->kind != ValueKind::string || pid->items()[0]->s() != "storage")
        throw Error(ErrorKind::unsupported, "",
                    m_record + ": persistent id is not a torch storage reference: " + repr(pid, 80),
                    offset);
    const Value* cls = pid->items()[1];
    const Value* key = pid->items()[2];
    const Value* loc = pid->items()[3];
    const Value* numel = pid->items()[4];
    if (cls->kind != ValueKind::global || key->kind != ValueKind::string ||
        loc->kind != ValueKind::string || numel->kind != ValueKind::integer || numel->i() < 0)
        throw Error(ErrorKind::corrupt, "", m_record + ": malformed storage reference " + repr(pid, 120),
                    offset);
    // torch < 0.4 saved storage slices: view_metadata (view_key, offset, size) names a slice of the
    // storage `key`, which is saved whole (its record is the key's).
    const Value* view = pid->items().size() >= 6 && pid->items()[5]->kind != ValueKind::none ? pid->items()[5] : nullptr;
    if (view && (view->kind != ValueKind::tuple || view->items().size() != 3 || view->items()[0]->kind != ValueKind::string ||
                 view->items()[1]->kind != ValueKind::integer || view->items()[2]->kind != ValueKind::integer ||
                 view->items()[1]->i() < 0 || view->items()[2]->i() < 0))
        throw Error(ErrorKind::corrupt, "", m_record + ": malformed storage view " + repr(view, 120), offset);
    auto dt = dtype_from_storage_class(cls->s2);
    if (!dt || (cls->s() != "torch" && cls->s() != "torch.storage"))
        throw Error(ErrorKind::unsupported, "",
                    m_record + ": unknown storage class " + global_name(cls), offset);

    Value* root = storage_value(cls, key->s(), loc->s(), static_cast<uint64_t>(numel->i()), *dt, offset);
    if (!view) {
        m_arena.recycle(pid);  // read: the storage's value stands for it now
        return root;
    }
    auto [it, fresh] = m_views.try_emplace(std::string(view->items()[0]->s()));
    if (!fresh) return it->second.value;
    StorageView& sv = it->second;
    sv.offset = static_cast<uint64_t>(view->items()[1]->i());
    sv.numel = static_cast<uint64_t>(view->items()[2]->i());
    const StorageInfo& whole = m_storages[static_cast<size_t>(root->i())];
    if (sv.offset > whole.numel || sv.numel > whole.numel - sv.offset)
        throw Error(ErrorKind::corrupt, "", m_record + ": storage view " + it->first + " (elements " + std::to_string(sv.offset) + "+" +
                                                std::to_string(sv.numel) + ") lies outside storage " + std::string(whole.key) + " (" +
                                                std::to_string(whole.numel) + " elements)", offset);
    sv.value = m_arena.make(ValueKind::storage, offset);
    sv.value->set_i(root->i());
    sv.value->shared = true;  // every load of the slice returns this value, which m_view_of knows it by
    sv.value->set_s(m_arena.own(std::string(dtype_name(whole.dtype)) + ", " + std::to_string(sv.numel) + " elements, key " + it->first +
                              ": elements " + std::to_string(sv.offset) + "–" + std::to_string(sv.offset + sv.numel) + " of storage " +
                              std::string(whole.key)));
    m_view_of.emplace(sv.value, &sv);
    return sv.value;
}

Value* TorchHooks::storage_value(const Value* cls, std::string_view k, std::string_view location, uint64_t numel, DType dtype,
                                 uint64_t offset) {
    auto storage_key = [this](size_t pos) -> std::string_view { return m_storages[pos].key; };
    auto number = DecimalIndex::number(k);
    bool by_number = number && m_storage_by_number.covers(*number);
    size_t known = by_number ? m_storage_by_number.find(*number) : m_storage_by_key.find(k, storage_key);
    if (known != StringIndex::npos) {
        const StorageInfo& s = m_storages[known];
        if (s.dtype != dtype || s.numel != numel)
            m_problems.push_back({"storage_conflict", std::string(k),
                                  "storage " + std::string(k) + " is referenced as " +
                                      std::string(dtype_name(s.dtype)) + "×" + std::to_string(s.numel) +
                                      " and as " + std::string(dtype_name(dtype)) + "×" +
                                      std::to_string(numel)});
        return storage_value(known, offset);
    }
    StorageInfo s;
    s.key = k;
    s.dtype = dtype;
    s.numel = numel;
    s.location = location;  // the pickle's text, as the key is
    if (cls != m_class_value) {  // one storage class for all of a file's storages, as a rule
        m_class_value = cls;
        m_class_name = m_arena.own(global_name(cls));
    }
    s.storage_class = m_class_name;
    if (!checked_mul(s.numel, dtype_size(s.dtype)))
        throw Error(ErrorKind::corrupt, "", m_record + ": storage " + std::string(k) + " size overflows", offset);
    // Its values' text, "float32, 16 elements": one for all storages of a dtype and size (the key is
    // each value's s2), not 30 bytes a storage.
    auto [size_text, fresh] = m_size_text.try_emplace({s.dtype, s.numel});
    if (fresh) {
        std::string& text = m_scratch;  // one buffer for every text: no allocation each
        text.assign(dtype_name(s.dtype)).append(", ");
        append_int(text, static_cast<int64_t>(s.numel));
        size_text->second = m_arena.own(text.append(" elements"));
    }
    m_storage_text.push_back(size_text->second);
    if (by_number) m_storage_by_number.insert(*number, m_storages.size());
    else m_storage_by_key.insert(k, m_storages.size(), storage_key);
    m_storages.push_back(std::move(s));
    return storage_value(m_storages.size() - 1, offset);
}

Value* TorchHooks::storage_value(size_t pos, uint64_t offset) {
    // A value of its own for each load of a storage (the id tuple may sit in the memo), which the
    // rebuild that reads it gives back: nothing else holds a storage's value, so a tensor leaves
    // none behind (120 bytes a tensor of a state dict).
    Value* v = m_arena.make(ValueKind::storage, offset);
    v->set_i(static_cast<int64_t>(pos));
    v->set_s(m_storage_text[pos]);
    v->s2 = m_storages[pos].key;
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
    v->set_i(static_cast<int64_t>(m_tensors.size()));
    std::string& text = m_scratch;
    text.assign(dtype_name(info.dtype)).append("[");
    for (size_t n = 0; n < info.shape.size(); ++n) append_int(text.append(n ? ", " : ""), info.shape[n]);
    text.append("]");
    if (text != m_tensor_text) m_tensor_text = m_arena.own(text);  // tensors in a row share a shape, as a rule
    v->set_s(m_tensor_text);
    m_tensors.push_back(std::move(info));
    return v;
}

Value* TorchHooks::rebuild_tensor(Value* made, std::string_view name, ValueSpan a) {
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
    t.storage = static_cast<size_t>(a[0]->i());
    const StorageInfo& st = m_storages[t.storage];
    t.dtype = st.dtype;
    if (!is_int(a[1]) || a[1]->i() < 0) bad(made, std::string(name) + ": storage offset is not a non-negative int");
    t.storage_offset = a[1]->i();
    if (!int_tuple(a[2], t.shape) || !int_tuple(a[3], t.stride))
        bad(made, std::string(name) + ": size or stride is not a tuple of ints");
    if (need >= 6) {
        const Value* rg = a[q ? 5 : 4];
        if (rg->kind != ValueKind::boolean && rg->kind != ValueKind::integer)
            bad(made, std::string(name) + ": requires_grad is not a bool");
        t.requires_grad = rg->i() != 0;
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
    if (q) {
        quantization(made, a[4], t);
        return tensor_value(std::move(t), made);
    }
    Value* args = made->args();  // read: the table holds what they said (the storage's value is kept)
    Value* v = tensor_value(std::move(t), made);
    m_arena.recycle(args);
    return v;
}

void TorchHooks::count_elements(const Value* made, std::string_view name, TensorInfo& t) const {
    if (t.shape.size() != t.stride.size()) bad(made, std::string(name) + ": size and stride differ in length");
    if (const char* why = t.count_elements()) bad(made, std::string(name) + ": " + why);
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
    const Value* c = made->callable();
    if (c->kind != ValueKind::global) return nullptr;
    if (made->how == MakeHow::newobj)
        if (auto it = m_global_index.find(global_name(c)); it != m_global_index.end() && !m_globals[it->second].instantiated++)
            m_globals[it->second].first_instantiated = made->offset;
    std::string_view mod = c->s(), name = c->s2;
    ValueSpan a = made->args()->items();
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
        std::string_view full = a[0]->s();
        if (full.substr(0, 6) != "torch." || !layout_from_name(full)) return nullptr;
        Value* g = retype(made, ValueKind::global);
        g->set_s("torch");
        g->s2 = m_arena.own(full.substr(6));
        return g;
    }
    if (mod == "torch" && name == "Size" && a.size() == 1 && a[0]->kind == ValueKind::tuple) {
        const Value* sizes = a[0];
        Value* s = retype(made, ValueKind::tuple);
        // The tuple's items are the Size's too, and the tuple may be memoized: the arena must never
        // take them back through the Size (a rebuild's argument), nor the Size's slots with them.
        m_arena.set_items(s, sizes->items());
        s->shared = true;
        s->depth = sizes->depth;
        s->s2 = "torch.Size";
        return s;
    }
    if (mod == "torch" && name == "device" && !a.empty() && a[0]->kind == ValueKind::string) {
        std::string_view type = a[0]->s();
        int64_t index = a.size() > 1 && a[1]->kind == ValueKind::integer ? a[1]->i() : -1;
        Value* d = retype(made, ValueKind::device);
        d->set_i(index);
        size_t colon = type.find(':');
        if (colon != std::string_view::npos) {
            std::string idx(type.substr(colon + 1));
            d->set_i(std::atoll(idx.c_str()));
            type = type.substr(0, colon);
        }
        d->set_s(type);
        return d;
    }
    if (mod == "builtins" && (name == "set" || name == "frozenset") && plain_call) {
        if (!a.empty() && a[0]->kind != ValueKind::list && a[0]->kind != ValueKind::tuple) return nullptr;
        const Value* from = a.empty() ? nullptr : a[0];
        Value* s = retype(made, name == "set" ? ValueKind::set : ValueKind::frozenset);
        if (from) {
            m_arena.set_items(s, from->items());
            s->shared = true;  // its items are the list's too (as a Size's above)
            s->depth = from->depth;
        }
        return s;
    }
    if (mod == "builtins" && name == "complex" && plain_call && a.size() == 2 &&
        a[0]->kind == ValueKind::floating && a[1]->kind == ValueKind::floating) {
        double re = a[0]->f(), im = a[1]->f();
        Value* z = retype(made, ValueKind::complex);
        z->set_f(re);
        z->set_f2(im);
        return z;
    }
    if (mod == "_codecs" && name == "encode" && plain_call && !a.empty() &&
        a[0]->kind == ValueKind::string) {
        // protocol 2 writes bytes as _codecs.encode(text, 'latin1'): decode UTF-8 → Latin-1 bytes.
        std::string_view enc = a.size() > 1 && a[1]->kind == ValueKind::string ? a[1]->s() : "utf-8";
        std::string out;
        if (!pickle_text::codecs_encode(a[0]->s(), enc, out)) return nullptr;
        Value* b = retype(made, ValueKind::bytes);
        b->set_s(m_arena.own(std::move(out)));
        return b;
    }
    if (mod == "builtins" && name == "bytearray" && plain_call && a.size() == 1 &&
        a[0]->kind == ValueKind::bytes) {
        std::string_view data = a[0]->s();
        Value* b = retype(made, ValueKind::bytearray);
        b->set_s(data);
        return b;
    }
    return nullptr;
}

}  // namespace ckpt

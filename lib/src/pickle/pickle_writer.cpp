#include "pickle/pickle_writer.hpp"

#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/bytes.hpp"
#include "ckpt/error.hpp"

namespace ckpt {

namespace {

class Writer {
public:
    std::string out;

    void op(char c) { out += c; }
    void u32(uint32_t v) { append_le(out, v, 4); }
    // Every value torch.save memoizes gets a BINPUT / LONG_BINPUT, as pickle's memo does.
    void put() {
        if (m_memo < 256) {
            op('q');
            out += static_cast<char>(m_memo);
        } else {
            op('r');
            u32(m_memo);
        }
        ++m_memo;
    }
    void get(uint32_t index) {
        if (index < 256) {
            op('h');
            out += static_cast<char>(index);
        } else {
            op('j');
            u32(index);
        }
    }
    void str(const std::string& s) {
        op('X');
        u32(static_cast<uint32_t>(s.size()));
        out += s;
        put();
    }
    // A string pickle would memoize once and fetch after (the same object each time).
    void shared_str(const std::string& s) {
        auto it = m_strings.find(s);
        if (it != m_strings.end()) return get(it->second);
        m_strings.emplace(s, m_memo);
        str(s);
    }
    void global(const std::string& module, const std::string& name) {
        std::string key = module + "\n" + name;
        auto it = m_globals.find(key);
        if (it != m_globals.end()) return get(it->second);
        op('c');
        out += module + "\n" + name + "\n";
        m_globals.emplace(key, m_memo);
        put();
    }
    void integer(int64_t v) {
        if (v >= 0 && v < 256) {
            op('K');
            out += static_cast<char>(v);
        } else if (v >= 0 && v < 65536) {
            op('M');
            append_le(out, static_cast<uint64_t>(v), 2);
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
            op('J');
            u32(static_cast<uint32_t>(v));
        } else {  // LONG1: little-endian two's complement, shortest form
            std::string bytes = le_bytes(static_cast<uint64_t>(v), 8);
            while (bytes.size() > 1 && ((bytes.back() == 0 && !(bytes[bytes.size() - 2] & 0x80)) ||
                                        (bytes.back() == '\xff' && (bytes[bytes.size() - 2] & 0x80))))
                bytes.pop_back();
            op('\x8a');
            out += static_cast<char>(bytes.size());
            out += bytes;
        }
    }
    void int_tuple(const std::vector<int64_t>& v) {
        if (v.empty()) {
            op(')');
            return;
        }
        if (v.size() > 3) op('(');
        for (int64_t x : v) integer(x);
        op(v.size() == 1 ? '\x85' : v.size() == 2 ? '\x86' : v.size() == 3 ? '\x87' : 't');
        put();
    }

private:
    uint32_t m_memo = 0;
    std::unordered_map<std::string, uint32_t> m_strings, m_globals;
};

void tensor(Writer& w, const PickledTensor& t) {
    std::string cls(storage_class_of(t.dtype));
    if (cls.empty())
        throw Error(ErrorKind::unsupported, "",
                    "tensor " + t.name + " is " + std::string(dtype_name(t.dtype)) + ", which torch.save files of torch 1.13 cannot hold");
    w.global("torch._utils", "_rebuild_tensor_v2");
    w.op('(');
    w.op('(');
    w.shared_str("storage");
    w.global("torch", cls);
    w.shared_str(t.storage_key);
    w.shared_str("cpu");
    w.integer(static_cast<int64_t>(t.storage_numel));
    w.op('t');
    w.put();
    w.op('Q');  // BINPERSID
    w.integer(t.offset);
    w.int_tuple(t.shape);
    w.int_tuple(t.stride);
    w.op('\x89');  // requires_grad False
    w.global("collections", "OrderedDict");
    w.op(')');
    w.op('R');
    w.put();
    w.op('t');
    w.put();
    w.op('R');
    w.put();
}

}  // namespace

bool tree_writable(const Value* v) {
    std::unordered_set<const Value*> open;  // the containers being walked: one seen again is a cycle
    std::function<bool(const Value*, int)> ok = [&](const Value* x, int depth) {
        switch (x->kind) {
            case ValueKind::none: case ValueKind::boolean: case ValueKind::integer: case ValueKind::big_integer:
            case ValueKind::floating: case ValueKind::string: case ValueKind::bytes: case ValueKind::tensor:
            case ValueKind::dtype:
                return true;
            case ValueKind::tuple: case ValueKind::list: case ValueKind::set: case ValueKind::frozenset:
            case ValueKind::dict: {
                if (depth > 1000 || !open.insert(x).second) return false;
                bool r = true;
                for (const Value* i : x->kind == ValueKind::dict ? x->entries() : x->items()) r = r && ok(i, depth + 1);
                open.erase(x);
                return r;
            }
            default:
                return false;
        }
    };
    return ok(v, 0);
}

std::string tree_pickle(const std::vector<TreeEntry>& top, const std::function<const PickledTensor&(size_t)>& tensor_of,
                        const Value* renamed, const std::function<std::string(const std::string&)>& rename,
                        std::vector<std::string>& skipped) {
    Writer w;
    w.op('\x80');
    w.out += '\x02';
    std::function<void(const Value*, const std::string&)> value;
    auto items = [&](ValueSpan list, const std::string& path) {
        for (size_t i = 0; i < list.size(); ++i) {
            if (!tree_writable(list[i]))
                throw Error(ErrorKind::unsupported, "", path + "[" + std::to_string(i) + "] is " + repr(list[i], 60) + ", which a plain torch.save file cannot hold");
            value(list[i], path + "." + std::to_string(i));
        }
    };
    auto dict_items = [&](const std::vector<std::pair<std::string, const Value*>>& kv, const std::vector<const Value*>& keys,
                          const std::string& path) {
        size_t n = 0;
        for (size_t i = 0; i < kv.size(); ++i) {
            std::string sub = path.empty() ? kv[i].first : path + "." + kv[i].first;
            if (!tree_writable(kv[i].second) || (keys[i] && !tree_writable(keys[i]))) {
                skipped.push_back(sub);
                continue;
            }
            if (n % 1000 == 0) w.op('(');
            if (keys[i]) value(keys[i], sub);
            else w.str(kv[i].first);
            value(kv[i].second, sub);
            if (n % 1000 == 999) w.op('u');
            ++n;
        }
        if (n % 1000 != 0) w.op('u');
    };
    value = [&](const Value* v, const std::string& path) {
        switch (v->kind) {
            case ValueKind::none: w.op('N'); return;
            case ValueKind::boolean: w.op(v->i() ? '\x88' : '\x89'); return;
            case ValueKind::integer: w.integer(v->i()); return;
            case ValueKind::big_integer:  // LONG4 of its little-endian bytes
                w.op('\x8b');
                w.u32(static_cast<uint32_t>(v->s().size()));
                w.out += v->s();
                return;
            case ValueKind::floating: {
                w.op('G');
                uint64_t bits;
                double d = v->f();
                std::memcpy(&bits, &d, 8);
                for (int i = 7; i >= 0; --i) w.out += static_cast<char>((bits >> (8 * i)) & 0xff);
                return;
            }
            case ValueKind::string: w.str(std::string(v->s())); return;
            case ValueKind::bytes:  // BINBYTES (protocol 3's opcode; every unpickler reads it)
                w.op('B');
                w.u32(static_cast<uint32_t>(v->s().size()));
                w.out += v->s();
                w.put();
                return;
            case ValueKind::dtype: w.global("torch", std::string(v->s2)); return;
            case ValueKind::tensor: tensor(w, tensor_of(static_cast<size_t>(v->i()))); return;
            case ValueKind::tuple:
                if (v->s2 == "torch.Size") {
                    w.global("torch", "Size");
                    w.op('(');
                    w.op('(');
                    items(v->items(), path);
                    w.op('t');
                    w.op('t');
                    w.op('R');
                    w.put();
                    return;
                }
                w.op('(');
                items(v->items(), path);
                w.op('t');
                w.put();
                return;
            case ValueKind::list:
                w.op(']');
                w.put();
                if (!v->items().empty()) {
                    w.op('(');
                    items(v->items(), path);
                    w.op('e');
                }
                return;
            case ValueKind::set: case ValueKind::frozenset:
                w.global("builtins", v->kind == ValueKind::set ? "set" : "frozenset");
                w.op(']');
                if (!v->items().empty()) {
                    w.op('(');
                    items(v->items(), path);
                    w.op('e');
                }
                w.op('\x85');
                w.op('R');
                w.put();
                return;
            case ValueKind::dict: {
                if (v->s2 == "collections.OrderedDict") {
                    w.global("collections", "OrderedDict");
                    w.op(')');
                    w.op('R');
                } else {
                    w.op('}');
                }
                w.put();
                std::vector<std::pair<std::string, const Value*>> kv;
                std::vector<const Value*> keys;
                for (size_t i = 0; i < v->dict_size(); ++i) {
                    const Value* k = v->dict_key(i);
                    bool text = k->kind == ValueKind::string;
                    std::string name = text ? std::string(k->s()) : repr(k, 60);
                    if (text && v == renamed) name = rename(name);
                    kv.push_back({name, v->dict_value(i)});
                    keys.push_back(text ? nullptr : k);
                }
                dict_items(kv, keys, path);
                return;
            }
            default:
                throw Error(ErrorKind::unsupported, "", path + " is " + repr(v, 60) + ", which a plain torch.save file cannot hold");
        }
    };
    w.op('}');
    w.put();
    std::vector<std::pair<std::string, const Value*>> kv;
    std::vector<const Value*> keys;
    for (const TreeEntry& e : top) {
        kv.push_back({e.key, e.value});
        keys.push_back(nullptr);
    }
    dict_items(kv, keys, "");
    w.op('.');
    return w.out;
}

std::string state_dict_pickle(const std::vector<PickledTensor>& tensors) {
    Writer w;
    w.op('\x80');
    w.out += '\x02';
    w.global("collections", "OrderedDict");
    w.op(')');
    w.op('R');
    w.put();
    for (size_t i = 0; i < tensors.size(); ++i) {
        if (i % 1000 == 0) w.op('(');
        const PickledTensor& t = tensors[i];
        w.str(t.name);
        tensor(w, t);
        if (i % 1000 == 999 || i + 1 == tensors.size()) w.op('u');
    }
    w.op('.');
    return w.out;
}

}  // namespace ckpt

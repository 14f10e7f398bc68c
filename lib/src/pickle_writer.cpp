#include "ckpt/pickle_writer.hpp"

#include <unordered_map>

#include "ckpt/error.hpp"

namespace ckpt {

namespace {

class Writer {
public:
    std::string out;

    void op(char c) { out += c; }
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
    }
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
            out += static_cast<char>(v & 0xff);
            out += static_cast<char>(v >> 8);
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
            op('J');
            u32(static_cast<uint32_t>(v));
        } else {  // LONG1: little-endian two's complement, shortest form
            std::string bytes;
            uint64_t u = static_cast<uint64_t>(v);
            for (int i = 0; i < 8; ++i) bytes += static_cast<char>((u >> (8 * i)) & 0xff);
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

}  // namespace

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
        std::string cls(storage_class_of(t.dtype));
        if (cls.empty())
            throw Error(ErrorKind::unsupported, "",
                        "tensor " + t.name + " is " + std::string(dtype_name(t.dtype)) + ", which torch.save files of torch 1.13 cannot hold");
        w.str(t.name);
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
        if (i % 1000 == 999 || i + 1 == tensors.size()) w.op('u');
    }
    w.op('.');
    return w.out;
}

}  // namespace ckpt

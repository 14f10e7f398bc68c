#include "scan/torchscript_code.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "scan/pickle_scan.hpp"

namespace ckpt {

namespace {

struct Call {
    std::string chain;  // "ops.aten.save", "torch.save", "self.set_weight_bias", ".set_", "print"
};

struct Method {
    std::string cls, name, file;
    uint64_t offset = 0;
    std::vector<Call> calls;
};

enum class Risk { none, memory, custom, files };

struct Verdict {
    Risk risk = Risk::none;
    std::string op;   // "aten::save"
    std::string why;
};

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The calls in a method's body: a chain of names joined by dots, then '(' — with any blanks,
// newlines, comments and line continuations between them, as TorchScript's lexer takes them inside
// brackets (`(torch.\n  from_file (…))` is a call of torch.from_file). A chain that starts with a
// dot follows an expression: a method of a value. Strings are skipped.
std::vector<Call> calls_in(std::string_view body) {
    // Tokens: names, '.', '(', and anything else as a break.
    struct Tok { char kind; std::string_view text; };  // 'n' name, '.', '(', 'x' other
    std::vector<Tok> toks;
    size_t i = 0;
    while (i < body.size()) {
        char c = body[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\\') {
            ++i;
        } else if (c == '#') {
            while (i < body.size() && body[i] != '\n') ++i;
        } else if (c == '"' || c == '\'') {
            bool triple = body.substr(i, 3) == std::string(3, c);
            size_t q = i + (triple ? 3 : 1);
            while (q < body.size() && !(triple ? body.substr(q, 3) == std::string(3, c) : body[q] == c)) q += body[q] == '\\' ? 2 : 1;
            i = std::min(body.size(), q + (triple ? 3 : 1));
            toks.push_back({'x', {}});
        } else if (ident_char(c)) {
            size_t b = i;
            while (i < body.size() && ident_char(body[i])) ++i;
            toks.push_back({std::isdigit(static_cast<unsigned char>(body[b])) ? 'x' : 'n', body.substr(b, i - b)});
        } else {
            toks.push_back({c == '.' ? '.' : c == '(' ? '(' : 'x', body.substr(i, 1)});
            ++i;
        }
    }
    std::vector<Call> out;
    for (size_t k = 0; k < toks.size(); ++k) {
        if (toks[k].kind != 'n' && toks[k].kind != '.') continue;
        // The longest chain from here: [.]name(.name)*
        size_t j = k;
        std::string chain;
        if (toks[j].kind == '.') {
            chain = ".";
            ++j;
        }
        if (j >= toks.size() || toks[j].kind != 'n') continue;
        chain += toks[j++].text;
        while (j + 1 < toks.size() && toks[j].kind == '.' && toks[j + 1].kind == 'n') {
            chain += ".";
            chain += toks[j + 1].text;
            j += 2;
        }
        if (j < toks.size() && toks[j].kind == '(') out.push_back({chain});
        k = j - 1;
    }
    return out;
}

std::vector<Method> methods_of(const std::string& file, std::string_view src, uint64_t offset) {
    std::vector<Method> out;
    std::vector<std::string_view> lines;
    for (size_t b = 0; b <= src.size();) {
        size_t e = src.find('\n', b);
        if (e == std::string_view::npos) e = src.size();
        lines.push_back(src.substr(b, e - b));
        b = e + 1;
    }
    auto indent = [](std::string_view l) {
        size_t n = 0;
        while (n < l.size() && (l[n] == ' ' || l[n] == '\t')) ++n;
        return n;
    };
    std::string cls;
    for (size_t i = 0; i < lines.size(); ++i) {
        std::string_view l = lines[i];
        size_t in = indent(l);
        std::string_view t = l.substr(in);
        if (in == 0 && t.substr(0, 6) == "class ") {
            size_t e = 6;
            while (e < t.size() && ident_char(t[e])) ++e;
            cls = std::string(t.substr(6, e - 6));
            continue;
        }
        if (t.substr(0, 4) != "def ") continue;
        size_t e = 4;
        while (e < t.size() && ident_char(t[e])) ++e;
        Method m{in == 0 ? "" : cls, std::string(t.substr(4, e - 4)), file, offset, {}};
        // The signature may span lines: it ends where its parentheses close.
        int depth = 0;
        size_t j = i;
        for (;; ++j) {
            for (char c : lines[j]) depth += c == '(' ? 1 : c == ')' ? -1 : 0;
            if (depth <= 0 || j + 1 >= lines.size()) break;
        }
        size_t body_begin = j + 1, body_end = body_begin;
        while (body_end < lines.size() &&
               (lines[body_end].find_first_not_of(" \t\r") == std::string_view::npos || indent(lines[body_end]) > in))
            ++body_end;
        if (body_begin < lines.size()) {
            const char* from = lines[body_begin].data();
            const char* to = body_end < lines.size() ? lines[body_end].data() : src.data() + src.size();
            m.calls = calls_in(std::string_view(from, static_cast<size_t>(to - from)));
        }
        out.push_back(std::move(m));
        i = body_end ? body_end - 1 : i;
    }
    return out;
}

// Namespaces of operators every torch build registers.
bool torch_namespace(std::string_view ns) {
    static const std::set<std::string_view> k = {"aten", "prim", "quantized", "_quantized", "prepacked", "quantized_decomposed",
                                                 "xnnpack", "mkldnn", "mkldnn_prepacked", "profiler", "cuda", "_caffe2",
                                                 "sparse", "fbgemm", "_nnapi", "onednn", "inductor", "vulkan", "metal", "mps"};
    return k.count(ns) > 0;
}

Verdict op_verdict(std::string_view ns, std::string_view op) {
    auto v = [&](Risk r, const char* why) { return Verdict{r, std::string(ns) + "::" + std::string(op), why}; };
    if (ns == "c10d" || ns == "_c10d_functional" || ns == "_dist_autograd" || ns == "distributed")
        return v(Risk::files, "talks to other processes (torch.distributed)");
    if (op == "save" || op == "_save_for_mobile" || op == "_save_parameters") return v(Risk::files, "writes a file");
    if (op == "from_file") return v(Risk::files, "maps a file of this machine into a tensor (shared=True writes to it)");
    if (op == "rpc_async" || op == "rpc_sync" || op == "rpc_remote" || op == "to_here" || op == "dist_backward")
        return v(Risk::files, "calls another process (torch.distributed.rpc)");
    if (op == "set_" || op == "set_data") return v(Risk::memory, "points a tensor at another storage: reads and writes past its bounds");
    if (op == "as_strided" || op == "as_strided_" || op == "as_strided_scatter" || op == "as_strided_copy" || op == "_unsafe_view")
        return v(Risk::memory, "a view with any sizes and strides: reads and writes past its storage");
    if (op == "_make_per_tensor_quantized_tensor" || op == "_make_per_channel_quantized_tensor")
        return v(Risk::memory, "a quantized tensor over raw parts");
    if ((op.substr(0, 8) == "_sparse_" && op.size() > 7 && op.substr(op.size() - 7) == "_unsafe"))
        return v(Risk::memory, "a sparse tensor whose indices are not checked");
    if (ns == "prim" && op == "id") return v(Risk::memory, "an object's address");
    if (!torch_namespace(ns)) return v(Risk::custom, "an operator of a library of its own, which must be loaded first and runs its own code");
    return {};
}

Verdict call_verdict(const Call& c) {
    std::string_view s = c.chain;
    auto parts = [](std::string_view t) {
        std::vector<std::string_view> p;
        size_t b = 0;
        for (size_t i = 0; i <= t.size(); ++i)
            if (i == t.size() || t[i] == '.') {
                p.push_back(t.substr(b, i - b));
                b = i + 1;
            }
        return p;
    };
    std::vector<std::string_view> p = parts(s);
    if (p.size() >= 3 && p[0] == "ops") return op_verdict(p[1], p[2]);
    if (p.size() >= 4 && p[0] == "torch" && p[1] == "ops") return op_verdict(p[2], p[3]);
    if (p.size() == 2 && p[0] == "torch") return op_verdict("aten", p[1]);
    if (p.size() >= 2) {  // a method of a value: x.set_(…), (state)[0].set_(…), self.w.as_strided(…)
        Verdict v = op_verdict("aten", p.back());
        if (v.risk == Risk::custom) return {};
        return v;
    }
    return {};
}

}  // namespace

void scan_torchscript(const std::vector<TorchScriptSource>& sources, PickleScanner& s) {
    std::vector<Method> methods;
    for (const TorchScriptSource& src : sources) {
        std::vector<Method> m = methods_of(src.name, src.code.as_chars(), src.offset);
        methods.insert(methods.end(), std::make_move_iterator(m.begin()), std::make_move_iterator(m.end()));
    }
    // What runs at load: every __setstate__, and what it calls (self.x(…) in its class; y.x(…) any
    // method of that name, since the value's class is not known here).
    std::multimap<std::string, size_t> by_name;
    for (size_t i = 0; i < methods.size(); ++i) by_name.emplace(methods[i].name, i);
    std::vector<bool> at_load(methods.size(), false);
    std::vector<size_t> work;
    for (size_t i = 0; i < methods.size(); ++i)
        if (methods[i].name == "__setstate__") at_load[i] = true, work.push_back(i);
    while (!work.empty()) {
        size_t i = work.back();
        work.pop_back();
        for (const Call& c : methods[i].calls) {
            size_t dot = c.chain.rfind('.');
            if (dot == std::string::npos) continue;
            std::string callee = c.chain.substr(dot + 1);
            bool own = c.chain.compare(0, 5, "self.") == 0 && c.chain.find('.', 5) == std::string::npos;
            auto [b, e] = by_name.equal_range(callee);
            for (auto it = b; it != e; ++it)
                if (!at_load[it->second] && (!own || methods[it->second].cls == methods[i].cls)) {
                    at_load[it->second] = true;
                    work.push_back(it->second);
                }
        }
    }
    std::vector<std::string> load_methods;
    std::set<std::string> load_ops;  // the operators what runs at load names (ops.NS.OP, torch.OP)
    for (size_t i = 0; i < methods.size(); ++i) {
        const Method& m = methods[i];
        std::string who = (m.cls.empty() ? "" : m.cls + ".") + m.name + " (" + m.file + ")";
        if (at_load[i] && m.name == "__setstate__") load_methods.push_back(m.cls.empty() ? m.name : m.cls + ".__setstate__");
        if (at_load[i])
            for (const Call& c : m.calls) {
                if (c.chain.compare(0, 4, "ops.") == 0) {
                    std::string rest = c.chain.substr(4);
                    size_t dot = rest.find('.');
                    if (dot != std::string::npos) load_ops.insert(rest.substr(0, dot) + "::" + rest.substr(dot + 1));
                } else if (c.chain.compare(0, 6, "torch.") == 0 && c.chain.find('.', 6) == std::string::npos) {
                    load_ops.insert("aten::" + c.chain.substr(6));
                }
            }
        std::map<std::string, Verdict> seen;
        for (const Call& c : m.calls) {
            Verdict v = call_verdict(c);
            if (v.risk != Risk::none) seen.emplace(v.op, v);
        }
        for (const auto& [op, v] : seen) {
            std::string when = at_load[i] ? "runs when torch.jit.load restores the archive (a __setstate__ or what it calls)"
                                          : "runs when the scripted model's method is called";
            bool dangerous = v.risk == Risk::files || (v.risk == Risk::memory && at_load[i]);
            bool unknown = v.risk == Risk::custom && at_load[i];
            std::string text = "TorchScript code " + who + " calls " + op + ", which " + v.why + "; it " + when;
            if (dangerous || unknown)
                s.finding({"torchscript_op", dangerous ? GlobalClass::dangerous : GlobalClass::unknown, "", m.file, m.offset, "", "", text});
            else
                s.note("torchscript_code", m.file, m.offset, text);
        }
    }
    if (!load_methods.empty()) {
        std::string list;
        for (size_t i = 0; i < load_methods.size() && i < 8; ++i) list += (i ? ", " : "") + load_methods[i];
        if (load_methods.size() > 8) list += ", … " + std::to_string(load_methods.size() - 8) + " more";
        std::string ops;
        size_t n = 0;
        for (const std::string& op : load_ops)
            if (n++ < 8) ops += (ops.empty() ? "" : ", ") + op;
        if (load_ops.size() > 8) ops += ", … " + std::to_string(load_ops.size() - 8) + " more";
        s.note("torchscript_code", "", sources.front().offset,
               std::to_string(load_methods.size()) + (load_methods.size() == 1 ? " method of its code runs" : " methods of its code run") +
                   " at load: " + list + (ops.empty() ? std::string("; no operator is called by name")
                                                       : "; the operators called: " + ops));
    }
}

}  // namespace ckpt

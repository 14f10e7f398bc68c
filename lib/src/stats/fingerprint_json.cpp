// A fingerprint as JSON (docs/schema/fingerprint.schema.json): written a row at a time, and read
// back row by row from a file (verify's reference), every field checked.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

namespace {
constexpr double k_inf = std::numeric_limits<double>::infinity();
}  // namespace

namespace {

nlohmann::json number_json(const Stat& v) {
    if (!v) return nullptr;
    if (std::isnan(*v)) return "nan";
    if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
    return *v;
}

std::optional<double> number_from(const nlohmann::json& j, const std::string& where, const std::string& path) {
    if (j.is_null()) return std::nullopt;
    if (j.is_number()) return j.get<double>();
    if (j.is_string()) {
        std::string s = j.get<std::string>();
        if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
        if (s == "inf") return k_inf;
        if (s == "-inf") return -k_inf;
    }
    throw Error(ErrorKind::format, path, "not a fingerprint: " + where + " is not a number");
}

const char* k_stat_names[] = {"mean", "std", "min", "max", "abs_mean", "l2"};

}  // namespace

nlohmann::json stats_json(const TensorStats& s) {
    nlohmann::json j;
    j["count"] = s.count;
    const Stat* v[] = {&s.mean, &s.std, &s.min, &s.max, &s.abs_mean, &s.l2};
    for (size_t i = 0; i < 6; ++i) j[k_stat_names[i]] = number_json(*v[i]);
    j["nan"] = s.nan;
    j["inf"] = s.inf;
    j["hash"] = s.hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.hash.text());
    return j;
}

namespace {

nlohmann::json fingerprint_head(const Fingerprint& f) {
    nlohmann::json j = report_head("fingerprint");
    j["file"] = f.file;
    j["file_size"] = f.file_size;
    j["scope"] = f.scope;
    j["tensors"] = nlohmann::json::array();
    return j;
}

}  // namespace

nlohmann::json print_json(const TensorPrint& t) {
    nlohmann::json r = {{"key", t.key}, {"dtype", t.dtype}, {"shape", t.shape}};
    r.update(stats_json(t.stats));
    if (!t.readable) r["hash"] = nullptr;
    return r;
}

nlohmann::json to_json(const Fingerprint& f) {
    nlohmann::json j = fingerprint_head(f);
    for (const auto& t : f.tensors) j["tensors"].push_back(print_json(t));
    return j;
}

void write_json(const Fingerprint& f, const std::function<void(std::string_view)>& sink) {
    write_json_streamed(fingerprint_head(f), 1, {{"tensors", [&](const JsonRowSink& row) {
                                                      for (const auto& t : f.tensors) row(print_json(t));
                                                  }}},
                        sink);
}

namespace {

[[noreturn]] void not_a_fingerprint(const std::string& path, const std::string& why) {
    throw Error(ErrorKind::format, path, "not a fingerprint: " + why);
}

// One row of "tensors" (the n-th, from 1), checked field by field; both readers use it.
TensorPrint tensor_print_from_json(const nlohmann::json& r, size_t n, const std::string& path) {
    auto bad = [&](const std::string& why) { not_a_fingerprint(path, why); };
    std::string where = "tensor " + std::to_string(n);
    if (!r.is_object() || !r.contains("key") || !r["key"].is_string()) bad(where + " has no \"key\"");
    TensorPrint t;
    t.key = r["key"].get<std::string>();
    if (!r.contains("dtype") || !r["dtype"].is_string()) bad(where + " has no \"dtype\"");
    t.dtype = r["dtype"].get<std::string>();
    if (!r.contains("shape") || !r["shape"].is_array()) bad(where + " has no \"shape\"");
    for (const auto& d : r["shape"]) {
        if (!d.is_number_integer()) bad(where + ": \"shape\" is not a list of integers");
        t.shape.push_back(d.get<int64_t>());
    }
    Stat* v[] = {&t.stats.mean, &t.stats.std, &t.stats.min, &t.stats.max, &t.stats.abs_mean, &t.stats.l2};
    for (size_t i = 0; i < 6; ++i)
        if (r.contains(k_stat_names[i])) *v[i] = number_from(r[k_stat_names[i]], where + "." + k_stat_names[i], path);
    auto count = [&](const char* name) -> uint64_t {
        if (!r.contains(name) || r[name].is_null()) return 0;
        if (!r[name].is_number_unsigned()) bad(where + "." + name + " is not a count");
        return r[name].get<uint64_t>();
    };
    t.stats.count = count("count");
    t.stats.nan = count("nan");
    t.stats.inf = count("inf");
    if (r.contains("hash") && r["hash"].is_string()) {
        auto h = ContentHash::parse(r["hash"].get_ref<const std::string&>());
        if (!h) bad(where + ".hash is not \"xxh3-128:\" and 32 hex digits");
        t.stats.hash = *h;
    }
    t.readable = !t.stats.hash.empty();
    return t;
}

// The fingerprint's fields besides its rows.
void fingerprint_header(Fingerprint& f, const nlohmann::json& j, const std::string& path) {
    f.file = json_string_or(j, "file", path);
    f.file_size = j.contains("file_size") && j["file_size"].is_number_unsigned() ? j["file_size"].get<uint64_t>() : 0;
    f.scope = json_string_or(j, "scope", "state_dict");
}

// Builds the document as nlohmann's own DOM parser would, except each element of the top-level
// "tensors" array: that one is built on its own, handed to `on_row` as soon as it is complete, and
// dropped. A fingerprint of 100,000 tensors is 38 MB of JSON and ~140 MB as a whole document.
class RowStreamer final : public nlohmann::json_sax<nlohmann::json> {
public:
    // `on_rows` when a "tensors" array starts (again, if the key is given twice: the last counts, as
    // in the DOM), `on_row` for each of its elements.
    RowStreamer(const std::string& path, std::function<void()> on_rows, std::function<void(const nlohmann::json&)> on_row)
        : m_path(path), m_on_rows(std::move(on_rows)), m_on_row(std::move(on_row)) {}
    nlohmann::json& document() { return m_root; }  // without the rows
    bool saw_rows() const { return m_rows != nullptr; }

    bool null() override { return put(nullptr); }
    bool boolean(bool b) override { return put(b); }
    bool number_integer(number_integer_t v) override { return put(v); }
    bool number_unsigned(number_unsigned_t v) override { return put(v); }
    bool number_float(number_float_t v, const string_t&) override { return put(v); }
    bool string(string_t& s) override { return put(std::move(s)); }
    bool binary(binary_t& b) override { return put(nlohmann::json::binary(std::move(b))); }
    bool key(string_t& k) override {
        m_key = std::move(k);
        return true;
    }
    bool start_object(std::size_t) override { return open(nlohmann::json::object()); }
    bool start_array(std::size_t) override { return open(nlohmann::json::array()); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
        json_parse_failed(m_path, pos, e.id == 406);  // 406: a number too large for a double
    }

private:
    bool at_row_level() const { return m_rows && m_stack.size() == 2 && m_stack.back() == m_rows; }
    nlohmann::json* insert(nlohmann::json&& v) {
        if (m_stack.size() == 1 && m_root.is_object() && m_key == "tensors") {  // (again): what was read goes
            m_rows = nullptr;
            m_on_rows();
        }
        nlohmann::json& parent = *m_stack.back();
        if (parent.is_array()) {
            parent.push_back(std::move(v));
            return &parent.back();
        }
        nlohmann::json& slot = parent[m_key];  // a key given twice: the last value, as the DOM parser
        slot = std::move(v);
        return &slot;
    }
    template <class V>
    bool put(V&& v) {
        if (m_stack.empty()) {
            m_root = std::forward<V>(v);
        } else if (at_row_level()) {
            nlohmann::json row(std::forward<V>(v));
            m_on_row(row);
        } else {
            insert(nlohmann::json(std::forward<V>(v)));
        }
        return true;
    }
    bool open(nlohmann::json&& container) {
        if (m_stack.empty()) {
            m_root = std::move(container);
            m_stack.push_back(&m_root);
        } else if (at_row_level()) {
            m_row = std::move(container);
            m_stack.push_back(&m_row);
        } else {
            bool rows = m_stack.size() == 1 && m_root.is_object() && m_key == "tensors" && container.is_array();
            nlohmann::json* p = insert(std::move(container));
            if (rows) m_rows = p;
            m_stack.push_back(p);
        }
        return true;
    }
    bool close() {
        bool row = m_stack.back() == &m_row;
        m_stack.pop_back();
        if (row) m_on_row(m_row);
        return true;
    }

    const std::string& m_path;
    std::function<void()> m_on_rows;
    std::function<void(const nlohmann::json&)> m_on_row;
    nlohmann::json m_root, m_row;
    std::vector<nlohmann::json*> m_stack;
    std::string m_key;
    nlohmann::json* m_rows = nullptr;
};

}  // namespace

Fingerprint fingerprint_from_json(const std::string& path, const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_array()) not_a_fingerprint(path, "no \"tensors\" list");
    Fingerprint f;
    fingerprint_header(f, j, path);
    size_t n = 0;
    for (const auto& r : j["tensors"]) f.tensors.push_back(tensor_print_from_json(r, ++n, path));
    return f;
}

std::optional<Fingerprint> read_fingerprint_file(const std::string& path) {
    MappedFile file(path);
    std::optional<ByteView> text = json_text(file.view());
    if (!text) return std::nullopt;
    Fingerprint f;
    size_t n = 0;
    std::optional<Error> row_error;  // the first bad row, said once the whole file has parsed
    auto start = [&] {
        f.tensors.clear();
        n = 0;
        row_error.reset();
    };
    RowStreamer rows(path, start, [&](const nlohmann::json& row) {
        ++n;
        if (row_error) return;
        try {
            f.tensors.push_back(tensor_print_from_json(row, n, path));
        } catch (const Error& e) {
            row_error = e;
        }
    });
    nlohmann::json::sax_parse(text->data, text->data + text->size, &rows);
    const nlohmann::json& j = rows.document();
    if (json_string_or(j, "command") == "inspect")
        throw Error(ErrorKind::usage, path,
                    "an inspect report holds no statistics; write a fingerprint with verify --write-fingerprint");
    if (!j.is_object() || !rows.saw_rows()) not_a_fingerprint(path, "no \"tensors\" list");
    if (row_error) throw *row_error;
    fingerprint_header(f, j, path);
    return f;
}

}  // namespace ckpt

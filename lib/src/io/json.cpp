#include "io/json.hpp"

#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

void append_new_member(nlohmann::ordered_json& object, std::string key, nlohmann::ordered_json value) {
    if (!object.is_object()) object = nlohmann::ordered_json::object();
    auto& members = object.get_ref<nlohmann::ordered_json::object_t&>();
    // ordered_map is a vector of pairs: its own emplace searches, the vector's appends.
    using Base = std::vector<std::pair<const std::string, nlohmann::ordered_json>>;
    static_cast<Base&>(members).emplace_back(std::move(key), std::move(value));
}

void append_json_string(std::string& out, std::string_view s, bool replace_invalid) {
    bool plain = true;
    for (unsigned char ch : s) plain = plain && ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\';
    if (plain) {
        out += '"';
        out += s;
        out += '"';
        return;
    }
    out += nlohmann::json(std::string(s)).dump(-1, ' ', false,
                                               replace_invalid ? nlohmann::json::error_handler_t::replace
                                                               : nlohmann::json::error_handler_t::strict);
}

std::string json_string_or(const nlohmann::json& j, const char* name, std::string fallback) {
    if (!j.is_object()) return fallback;
    auto it = j.find(name);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::optional<ByteView> json_text(ByteView v) {
    uint64_t i = 0;
    if (v.size >= 3 && v.data[0] == 0xef && v.data[1] == 0xbb && v.data[2] == 0xbf) i = 3;
    while (i < v.size && (v.data[i] == ' ' || v.data[i] == '\n' || v.data[i] == '\r' || v.data[i] == '\t')) ++i;
    if (i >= v.size || (v.data[i] != '{' && v.data[i] != '[')) return std::nullopt;
    return ByteView{v.data + i, v.size - i};
}

void json_parse_failed(const std::string& path, uint64_t byte, bool number_out_of_range) {
    if (number_out_of_range) throw Error(ErrorKind::format, path, "looks like JSON but holds a number out of range");
    throw Error(ErrorKind::format, path, "looks like JSON but does not parse (byte " + std::to_string(byte) + ")");
}

std::optional<nlohmann::json> read_json_file(const std::string& path) {
    MappedFile f(path);
    std::optional<ByteView> v = json_text(f.view());
    if (!v) return std::nullopt;
    try {
        return nlohmann::json::parse(v->data, v->data + v->size);
    } catch (const nlohmann::json::parse_error& e) {
        json_parse_failed(path, e.byte, false);
    } catch (const nlohmann::json::exception&) {
        json_parse_failed(path, 0, true);  // out_of_range.406: a number too large for a double (fuzz_safetensors)
    }
}

}  // namespace ckpt

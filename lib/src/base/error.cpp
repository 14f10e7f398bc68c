#include "ckpt/error.hpp"

namespace ckpt {

const char* error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::io: return "io";
        case ErrorKind::format: return "format";
        case ErrorKind::corrupt: return "corrupt";
        case ErrorKind::unsupported: return "unsupported";
        case ErrorKind::limit: return "limit";
        case ErrorKind::usage: return "usage";
    }
    return "error";
}

Error::Error(ErrorKind kind, std::string path, std::string message, std::optional<uint64_t> offset)
    : std::runtime_error(compose(path, message, offset)),
      m_kind(kind),
      m_path(std::move(path)),
      m_message(std::move(message)),
      m_offset(offset) {}

Error Error::with_path(const std::string& path) const {
    return Error(m_kind, path, m_message, m_offset);
}

std::string Error::compose(const std::string& path, const std::string& message,
                           std::optional<uint64_t> offset) {
    std::string out;
    if (!path.empty()) out = path + ": ";
    out += message;
    if (offset) out += " (at byte " + std::to_string(*offset) + ")";
    return out;
}

}  // namespace ckpt

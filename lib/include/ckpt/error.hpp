// Errors of the core library. A file that cannot be read is a ckpt::Error with a kind, the path and,
// where it is known, the byte offset; everything the caller needs for a one-line message and exit 2.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace ckpt {

enum class ErrorKind {
    io,           // open, map, read or write failed at the OS level
    format,       // not a format we know (not a checkpoint at all)
    corrupt,      // a format we know, but broken: truncated, bad offsets, inconsistent fields
    unsupported,  // well-formed, but uses something this version does not read
    limit,        // a resource cap was hit (nesting, memo, container size): refused, not crashed
    usage,        // the caller asked for something that does not fit the file (bad --state-dict-key …)
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, std::string path, std::string message,
          std::optional<uint64_t> offset = std::nullopt);

    ErrorKind kind() const { return m_kind; }
    const std::string& path() const { return m_path; }
    const std::string& message() const { return m_message; }
    std::optional<uint64_t> offset() const { return m_offset; }

    // A copy with the path filled in, for errors raised below the layer that knows the file name.
    Error with_path(const std::string& path) const;

private:
    static std::string compose(const std::string& path, const std::string& message,
                               std::optional<uint64_t> offset);
    ErrorKind m_kind;
    std::string m_path;
    std::string m_message;
    std::optional<uint64_t> m_offset;
};

// Runs `f`; an Error raised without a file (below the layer that knows which file it was reading)
// leaves naming `path`, so every message says which file is wrong.
template <class F>
decltype(auto) naming_file(const std::string& path, F&& f) {
    try {
        return std::forward<F>(f)();
    } catch (const Error& e) {
        if (e.path().empty()) throw e.with_path(path);
        throw;
    }
}

}  // namespace ckpt

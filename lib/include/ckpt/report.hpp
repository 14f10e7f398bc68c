// Pieces every report shares: the tool's identity and human-readable units.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ckpt {

constexpr int k_schema_version = 1;
const char* tool_version();

// {"name": "ckpt-tool", "version": "…"}
nlohmann::json tool_json();

// 1536 → "1.5 KiB"; bytes below 1 KiB as "123 B".
std::string human_bytes(uint64_t bytes);
// 11689512 → "11.69 M"
std::string human_count(uint64_t n);
// {64, 3, 7, 7} → "64×3×7×7"; {} → "()"
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace ckpt

// What a reader's model is checked for, and completed with, before any command uses it: every tensor's
// view inside its storage and every storage's record the right size (problems, not errors: inspect
// refuses them, verify reports them all), and a nested tensor's components, read from its small
// sizes, strides and offsets parts.
#include <cstring>
#include <functional>

#include "model/model_builder.hpp"
#include "io/zip.hpp"

namespace ckpt {

void ModelBuilder::check_storages() {
    for (const auto& s : c.storages) {
        if (!s.record_present) {
            c.problems.push_back({"missing_record", std::string(s.record),
                                    "storage " + std::string(s.key) + " has no record " + std::string(s.record)});
        } else if (s.record_size != s.nbytes()) {
            c.problems.push_back(
                {"record_size", std::string(s.record),
                 "record " + std::string(s.record) + " holds " + std::to_string(s.record_size) + " bytes, but storage " +
                     std::string(s.key) + " is " + std::to_string(s.numel) + " × " + std::string(dtype_name(s.dtype)) +
                     " = " + std::to_string(s.nbytes()) + " bytes"});
        }
    }
    std::vector<char> reported(c.tensors.size());  // by tensor: checked already
    // A sparse or nested tensor is checked through the tensors it is made of (its key, then the part's name).
    std::function<void(std::string_view, size_t)> check = [&](std::string_view key, size_t i) {
        const TensorInfo& t = c.tensors[i];
        if (t.extra) {
            for (const TensorPart& p : t.extra->parts) check(std::string(key) + "." + std::string(p.name), p.tensor);
            for (size_t k = 0; k < t.extra->components.size(); ++k) check(std::string(key) + "[" + std::to_string(k) + "]", t.extra->components[k]);
        }
        if (!t.strided_view() || reported[i]) return;
        reported[i] = 1;
        const StorageInfo& s = c.storages[t.storage];
        uint64_t elem_capacity = s.dtype == DType::untyped ? s.numel / dtype_size(t.dtype) : s.numel;
        uint64_t need = t.numel == 0 ? 0 : static_cast<uint64_t>(t.storage_offset) + t.extent;
        if (need > elem_capacity)
            c.problems.push_back(
                {"out_of_bounds", std::string(key),
                 "tensor " + std::string(key) + " (offset " + std::to_string(t.storage_offset) + ", spans " +
                     std::to_string(t.extent) + " elements) runs past the end of storage " + std::string(s.key) +
                     " (" + std::to_string(elem_capacity) + " elements)"});
    };
    for (const Entry& e : c.entries)
        if (e.tensor && !reported[*e.tensor]) check(e.key, *e.tensor);
}

namespace {

// The int64 elements of a small plain tensor (a nested tensor's sizes, strides, offsets), in
// row-major order; nullopt with `why` set when they cannot be read.
std::optional<std::vector<int64_t>> small_ints(const Checkpoint::Contents& c, const TensorInfo& t, std::string& why) {
    if (!t.plain() || t.dtype != DType::int64) return why = "not a plain int64 tensor", std::nullopt;
    if (t.numel > (1u << 22)) return why = std::to_string(t.numel) + " elements, more than this reader takes", std::nullopt;
    const StorageInfo& s = c.storages[t.storage];
    auto r = c.record_index(s.record);
    if (!s.record_present || !r) return why = "its record " + std::string(s.record) + " is missing", std::nullopt;
    RecordData data = c.record_data(*r);
    ByteView v = data.view();
    auto end = checked_add(static_cast<uint64_t>(t.storage_offset), t.extent);
    auto bytes = end ? checked_mul(*end, uint64_t{8}) : std::nullopt;
    if (t.numel && (!bytes || *bytes > v.size)) return why = "its record " + std::string(s.record) + " is too short", std::nullopt;
    std::vector<int64_t> out;
    out.reserve(t.numel);
    std::vector<int64_t> at(t.shape.size(), 0);
    for (uint64_t n = 0; n < t.numel; ++n) {
        uint64_t el = static_cast<uint64_t>(t.storage_offset);
        for (size_t d = 0; d < at.size(); ++d) el += static_cast<uint64_t>(at[d] * t.stride[d]);
        int64_t x;
        std::memcpy(&x, v.data + el * 8, 8);
        out.push_back(x);
        for (size_t d = at.size(); d-- > 0;) {
            if (++at[d] < t.shape[d]) break;
            at[d] = 0;
        }
    }
    return out;
}

// A nested tensor's components each become a tensor of the table: a lying sizes tensor must not
// make millions of them.
constexpr size_t k_max_components = 1u << 20;

}  // namespace

// Nested and jagged tensors: each component becomes a view of the buffer (values), its shape,
// strides and offset read from the small int64 parts. These few bytes are the only elements
// opening a checkpoint reads, and only where such tensors are.
void ModelBuilder::resolve_components() {
    for (size_t i = 0, n = c.tensors.size(); i < n; ++i) {
        Layout layout = c.tensors[i].layout;
        if (!c.tensors[i].nested() || !c.tensors[i].extra->components.empty()) continue;
        auto e = std::make_shared<TensorExtra>(*c.tensors[i].extra);
        auto fail = [&](const std::string& why) {
            c.problems.push_back({"nested_parts", "", "a nested tensor's components cannot be read: " + why});
        };
        std::string why;
        std::vector<std::optional<std::vector<int64_t>>> ints;
        for (size_t p = 1; p < e->parts.size(); ++p) {
            ints.push_back(small_ints(c, c.tensors[e->parts[p].tensor], why));
            if (!ints.back()) break;
        }
        if (ints.empty() || !ints.back()) {
            fail(std::string(e->parts[ints.size()].name) + " is " + why);
            continue;
        }
        const TensorInfo base = c.tensors[e->parts[0].tensor];
        // nested: sizes [n, d], strides [n, d], offsets [n]; jagged: offsets [B + 1] (and lengths [B])
        // along values' ragged dimension
        bool strided = layout == Layout::nested;
        const TensorInfo& sizes = c.tensors[e->parts[1].tensor];
        size_t count = strided ? (sizes.shape.empty() ? 0 : static_cast<size_t>(sizes.shape[0]))
                               : (ints[0]->empty() ? 0 : ints[0]->size() - 1);
        size_t dims = strided && sizes.shape.size() == 2 ? static_cast<size_t>(sizes.shape[1]) : 0;
        if (count > k_max_components) {
            fail(std::to_string(count) + " components, more than this reader takes (" + std::to_string(k_max_components) + ")");
            continue;
        }
        if (strided ? sizes.shape.size() > 2 || ints[0]->size() != count * dims || ints[1]->size() != count * dims || ints[2]->size() != count
                    : ints.size() > 1 && ints[1]->size() != count) {
            fail(strided ? "sizes, strides and offsets do not agree" : "offsets and lengths do not agree");
            continue;
        }
        std::vector<TensorInfo> comps(count);
        for (size_t k = 0; k < count; ++k) {
            TensorInfo& t = comps[k];
            t.dtype = base.dtype;
            t.storage = base.storage;
            t.rebuild = base.rebuild;
            bool overflow;
            if (strided) {
                t.shape.assign(ints[0]->begin() + k * dims, ints[0]->begin() + (k + 1) * dims);
                t.stride.assign(ints[1]->begin() + k * dims, ints[1]->begin() + (k + 1) * dims);
                overflow = __builtin_add_overflow(base.storage_offset, (*ints[2])[k], &t.storage_offset);
            } else {
                const std::vector<int64_t>& off = *ints[0];
                size_t r = static_cast<size_t>(e->axis - 1);
                t.shape = base.shape;
                t.stride = base.stride;
                int64_t step = 0;
                overflow = (ints.size() > 1 ? (t.shape[r] = (*ints[1])[k], false) : __builtin_sub_overflow(off[k + 1], off[k], &t.shape[r])) ||
                           __builtin_mul_overflow(off[k], base.stride[r], &step) ||
                           __builtin_add_overflow(base.storage_offset, step, &t.storage_offset);
            }
            if (overflow) t.storage_offset = -1;  // refused below
        }
        uint64_t numel = 0;
        bool ok = true;
        for (TensorInfo& t : comps) {
            ok = ok && t.storage_offset >= 0 && !t.count_elements();
            numel += t.numel;
        }
        if (!ok) {
            fail("a component's size, stride or offset is negative or too large");
            continue;
        }
        for (TensorInfo& t : comps) {
            e->components.push_back(c.tensors.size());
            c.tensors.push_back(std::move(t));
        }
        c.tensors[i].numel = numel;
        c.tensors[i].extra = std::move(e);
    }
}

}  // namespace ckpt

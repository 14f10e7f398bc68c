// The meaning of torch's globals for the pickle VM: storages from persistent ids, tensors from the
// rebuild functions, and the handful of builtins a torch pickle uses. Nothing here calls anything.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "pickle/bound_methods.hpp"
#include "ckpt/checkpoint.hpp"
#include "pickle/pickle.hpp"
#include "base/string_index.hpp"
#include "base/huge_pages.hpp"

namespace ckpt {

namespace torch_values {  // what the rebuild functions' arguments are (torch_hooks.cpp, torch_rebuilds.cpp)
inline bool is_int(const Value* v) { return v->kind == ValueKind::integer || v->kind == ValueKind::boolean; }
// A tuple of ints (a torch.Size is a tuple too).
template <class Ints>  // std::vector<int64_t>, Dims
bool int_tuple(const Value* v, Ints& out) {
    if (v->kind != ValueKind::tuple && v->kind != ValueKind::list) return false;
    out.clear();
    out.reserve(v->items().size());
    for (const Value* i : v->items()) {
        if (i->kind != ValueKind::integer) return false;
        out.push_back(i->i());
    }
    return true;
}
}  // namespace torch_values

class TorchHooks : public PickleHooks {
public:
    TorchHooks(ValueArena& arena, std::vector<StorageInfo>& storages,
               std::vector<TensorInfo>& tensors, std::vector<GlobalRef>& globals,
               std::vector<Problem>& problems, std::string record)
        : m_arena(arena), m_storages(storages), m_tensors(tensors), m_globals(globals),
          m_problems(problems), m_record(std::move(record)) {}

    // Room for `n` storages and tensors, so that the tables are written once, not copied as they
    // grow; storage keys 0 … n found by their number. Before the pickle runs.
    void reserve(size_t n) {
        if (m_storage_by_key.size() == 0 && !m_storage_by_number.covers(0)) m_storage_by_number = DecimalIndex(n + 1);
        m_storages.reserve(m_storages.size() + n);
        m_tensors.reserve(m_tensors.size() + n);
        advise_huge_pages(m_storages);
        advise_huge_pages(m_tensors);
        m_storage_text.reserve(n);
    }
    Value* global(Value* g, std::string_view written) override;
    Value* reduce(Value* made) override;
    Value* persistent_load(Value* pid, uint64_t offset) override;
    void mutate(Value* target, uint8_t, uint64_t) override { m_methods.used(target); }
    // After the pickle ran: what its uses of builtins.getattr were (GlobalRef::bound_methods).
    void finish();

private:
    // A storage slice of torch < 0.4 (a legacy persistent id's view_metadata): elements
    // [offset, offset + numel) of the storage its value names.
    struct StorageView {
        Value* value = nullptr;
        uint64_t offset = 0, numel = 0;
    };
    Value* storage_value(const Value* cls, std::string_view key, std::string_view location, uint64_t numel, DType dtype,
                         uint64_t offset);
    Value* storage_value(size_t pos, uint64_t offset);  // a new value of storage `pos`
    Value* rebuild_tensor(Value* made, std::string_view name, ValueSpan a);
    // A rebuild function of torch._utils, torch._tensor or nested tensors: the tensor, nullptr for
    // what is no tensor here; Error(unsupported) naming a rebuild function this reader does not know.
    Value* rebuild(Value* made, std::string_view module, std::string_view name, ValueSpan a);
    void count_elements(const Value* made, std::string_view name, TensorInfo& t) const;
    void quantization(const Value* made, const Value* params, TensorInfo& t);
    // The rebuild functions of tensors that are not one plain view of a storage.
    Value* rebuild_meta(Value* made, std::string_view name, ValueSpan a);
    Value* rebuild_quantized(Value* made, ValueSpan a);
    Value* rebuild_sparse(Value* made, std::string_view name, ValueSpan a);
    Value* rebuild_nested(Value* made, ValueSpan a);
    Value* rebuild_jagged(Value* made, const Value* kwargs);
    // `rebuild` is static text (TensorInfo::rebuild keeps a view of it)
    Value* nested_value(Value* made, std::string_view rebuild, Layout layout, std::shared_ptr<TensorExtra> e, bool requires_grad);
    Value* rebuild_from_type(Value* made, ValueSpan a);
    // The tensor a value is (a rebuilt tensor), or a clear error naming what `what` needed.
    const TensorInfo& tensor_arg(const Value* made, const Value* v, const std::string& what) const;
    size_t tensor_index(const Value* v) const { return static_cast<size_t>(v->i()); }
    // `made`, the object the VM built for a call and handed to reduce (nothing refers to it yet),
    // cleared to an empty value of `kind` at the same offset: the typed value takes its place
    // instead of a second value (two fewer values per tensor).
    static Value* retype(Value* made, ValueKind kind);
    Value* tensor_value(TensorInfo info, Value* made);
    [[noreturn]] void bad(const Value* at, const std::string& what) const;

    ValueArena& m_arena;
    std::vector<StorageInfo>& m_storages;
    std::vector<TensorInfo>& m_tensors;
    std::vector<GlobalRef>& m_globals;
    std::vector<Problem>& m_problems;
    std::string m_record;
    std::unordered_map<std::string, size_t> m_global_index;
    std::string m_scratch;
    // Storage key → position in m_storages: a small number's in m_storage_by_number (torch.save's
    // keys are 0, 1, …), any other key's by its text.
    DecimalIndex m_storage_by_number;
    StringIndex m_storage_by_key;
    const Value* m_class_value = nullptr;  // the last storage class seen, and its name in the arena
    std::string_view m_class_name;
    std::vector<std::string_view> m_storage_text;  // by position in m_storages: its values' text (in the arena)
    std::map<std::pair<DType, uint64_t>, std::string_view> m_size_text;  // those texts, by dtype and size
    std::string_view m_tensor_text;  // the last tensor value's text ("float32[4, 4]", in the arena)
    std::unordered_map<std::string, StorageView> m_views;          // view key → the slice (legacy files only)
    std::unordered_map<const Value*, const StorageView*> m_view_of;  // a slice's value → the slice
    BoundMethods m_methods;
};

}  // namespace ckpt

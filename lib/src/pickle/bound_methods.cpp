#include "pickle/bound_methods.hpp"

namespace ckpt {

namespace {

bool is_getattr(const Value* g) {
    return g && g->kind == ValueKind::global && g->s2 == "getattr" && (g->s() == "builtins" || g->s() == "__builtins__");
}

// An object made by one of torch's own classes (torch.nn.modules.*, torch.optim.*).
bool torch_class_instance(const Value* v) {
    if (v->kind != ValueKind::object || !v->callable() || v->callable()->kind != ValueKind::global) return false;
    std::string_view m = v->callable()->s(), n = v->callable()->s2;
    bool torch_module = m.substr(0, 17) == "torch.nn.modules." || m.substr(0, 12) == "torch.optim.";
    return torch_module && !n.empty() && n[0] >= 'A' && n[0] <= 'Z' && n.find('.') == std::string_view::npos;
}

// An enum class of the data that distributed training saves: getattr(cls, 'NAME') is how pickle
// writes one of its members (Python 3.11+ Enum.__reduce_ex__).
bool reviewed_enum(const Value* v) {
    if (v->kind != ValueKind::global) return false;
    std::string_view m = v->s(), n = v->s2;
    static constexpr std::pair<std::string_view, std::string_view> k_enums[] = {
        {"deepspeed.runtime.zero.config", "ZeroStageEnum"},
        {"megatron.core.enums", "Fp4Recipe"},
        {"megatron.core.enums", "Fp8Recipe"},
        {"megatron.core.enums", "ModelType"},
        {"megatron.core.transformer.enums", "AttnBackend"},
        {"megatron.core.transformer.enums", "AttnMaskType"},
        {"megatron.core.transformer.enums", "AttnType"},
        {"megatron.core.transformer.enums", "CudaGraphModule"},
        {"megatron.core.transformer.enums", "CudaGraphScope"},
        {"megatron.core.transformer.enums", "InferenceCudaGraphScope"},
        {"megatron.core.transformer.enums", "LayerType"},
        {"megatron.core.transformer.enums", "ModelType"},
        {"signal", "Signals"},
        {"torch.distributed._shard.sharded_tensor.metadata", "MEM_FORMAT_ENCODING"},
        {"torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"},
        {"torch.distributed.checkpoint.planner", "LoadItemType"},
        {"torch.distributed.checkpoint.planner", "WriteItemType"},
        {"transformer_engine.common.recipe", "Format"},
    };
    for (const auto& [em, en] : k_enums)
        if (m == em && n == en) return true;
    return false;
}

// A plain attribute name: no dunder, nothing but an identifier.
bool method_name(std::string_view n) {
    if (n.empty() || (n.size() > 4 && n.substr(0, 2) == "__" && n.substr(n.size() - 2) == "__")) return false;
    for (char c : n)
        if (!(c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return false;
    return true;
}

}  // namespace

void BoundMethods::reduce(const Value* made) {
    if (!is_getattr(made->callable())) {
        used(made->callable());  // a value called: if getattr made it, it is more than a stored method
        return;
    }
    const Value* a = made->args();
    bool method = made->how == MakeHow::reduce && a && a->kind == ValueKind::tuple && a->items().size() == 2 &&
                  (torch_class_instance(a->items()[0]) || reviewed_enum(a->items()[0])) && a->items()[1]->kind == ValueKind::string &&
                  method_name(a->items()[1]->s());
    if (method && m_example.empty()) {
        const Value* owner = a->items()[0]->kind == ValueKind::global ? a->items()[0] : a->items()[0]->callable();
        m_example = std::string(owner->s()) + "." + std::string(owner->s2) + "." + std::string(a->items()[1]->s());
    }
    ++(method ? m_methods : m_other);
}

void BoundMethods::used(const Value* v) {
    if (v && v->kind == ValueKind::object && is_getattr(v->callable())) ++m_other;
}

}  // namespace ckpt

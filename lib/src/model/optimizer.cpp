#include "model/optimizer.hpp"

#include "ckpt/checkpoint.hpp"

namespace ckpt {

namespace {
bool may_hold_optimizer(const Value* v) {
    return v->kind == ValueKind::dict || v->kind == ValueKind::list || v->kind == ValueKind::tuple;
}

void walk(const Value* v, const std::string& key, int depth, std::vector<OptimizerRef>& out) {
    if (depth > 3) return;
    auto join = [&](const std::string& part) { return key.empty() ? part : key + "." + part; };
    if (v->kind == ValueKind::list || v->kind == ValueKind::tuple) {
        for (size_t i = 0; i < v->items().size(); ++i)
            if (may_hold_optimizer(v->items()[i])) walk(v->items()[i], join(std::to_string(i)), depth + 1, out);
        return;
    }
    if (v->kind != ValueKind::dict) return;
    const Value* state = v->get("state");
    const Value* groups = v->get("param_groups");
    if (state && groups && state->kind == ValueKind::dict && groups->kind == ValueKind::list) {
        out.push_back({key, v});
        return;
    }
    for (size_t i = 0; i < v->dict_size(); ++i)  // a key text only for what can hold one (not 100,000 tensors)
        if (may_hold_optimizer(v->dict_value(i))) walk(v->dict_value(i), join(key_part(v->dict_key(i))), depth + 1, out);
}
}  // namespace

std::vector<OptimizerRef> find_optimizers(const Value* root) {
    std::vector<OptimizerRef> out;
    if (root) walk(root, "", 0, out);
    return out;
}

}  // namespace ckpt

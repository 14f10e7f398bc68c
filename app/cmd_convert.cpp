#include <iostream>

#include "ckpt/convert.hpp"
#include "ckpt/error.hpp"
#include "command.hpp"

namespace app {

namespace {
struct ConvertArgs {
    ckpt::ConvertRequest request;
    std::vector<std::string> metadata;
    std::string state_dict_key, dtype, max_shard_size;
    bool no_verify = false, json = false;
};
}  // namespace

Runner setup_convert(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<ConvertArgs>();
    ckpt::ConvertRequest& r = a->request;
    sub.add_option("IN", r.input, "Checkpoint to convert (never modified)")->required();
    sub.add_option("-o,--output", r.output, "The file to write")->required();
    sub.add_option("--to", r.to, "safetensors|pth: the format to write (default: from OUT's extension)");
    sub.add_option("--metadata", a->metadata, "K=V added to the safetensors __metadata__ (repeatable; the input's own is carried)");
    sub.add_option("--state-dict-key", a->state_dict_key, "Dotted path of the state dict (default: detected)");
    sub.add_option("--dtype", a->dtype,
                   "bfloat16|float16|float32|float64: cast floating-point tensors (PyTorch's rounding, through the "
                   "LibTorch backend); integer and bool tensors are never cast");
    sub.add_option("--max-shard-size", a->max_shard_size,
                   "Write shards of at most this size (2GB, 500MiB …) and a Hugging Face index (safetensors or pth)");
    sub.add_flag("--weights-only", r.weights_only,
                 "pth → pth: write just the state dict of a training checkpoint (optimizer, args … dropped, and listed); "
                 "without it pth → pth keeps the whole checkpoint");
    sub.add_flag("--no-verify", a->no_verify, "Do not read the output back and compare every tensor's content hash");
    sub.add_flag("--allow-expansion", r.allow_expansion,
                 "Write an output more than 1000 times the input (views that repeat elements, torch's expand, written out in full)");
    sub.add_flag("--force", r.force, "Overwrite OUT if it exists");
    sub.add_flag("--json", a->json, "One JSON object on stdout (docs/schema/convert.schema.json)");
    return [a, &global]() {
        return reporting_errors("convert", a->json, a->request.input, [&] {
            ckpt::ConvertRequest& rq = a->request;
            for (const auto& kv : a->metadata) {
                size_t eq = kv.find('=');
                if (eq == std::string::npos || eq == 0)
                    throw ckpt::Error(ckpt::ErrorKind::usage, rq.input, "--metadata " + kv + ": expected KEY=VALUE");
                rq.metadata.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
            }
            if (!a->state_dict_key.empty()) rq.open.state_dict_key = a->state_dict_key;
            if (auto d = cast_dtype(a->dtype, rq.input)) rq.dtype = d;
            rq.verify = !a->no_verify;
            rq.progress = progress_line(global, "convert");
            if (!a->max_shard_size.empty()) rq.max_shard_size = ckpt::parse_size(a->max_shard_size);
            ckpt::ConvertReport report = ckpt::convert(rq);
            print_report(report, a->json, global);
            return 0;
        });
    };
}

}  // namespace app

#include <iostream>

#include "ckpt/error.hpp"
#include "ckpt/merge.hpp"
#include "command.hpp"

namespace app {

namespace {
struct MergeArgs {
    ckpt::MergeRequest request;
    std::vector<std::string> strip;
    std::string tag, dtype, shard_size, state_dict_key, unpad_vocab;
    bool no_verify = false, json = false;
};
}  // namespace

Runner setup_merge(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<MergeArgs>();
    ckpt::MergeRequest& r = a->request;
    sub.add_option("IN", r.input,
                   "A DeepSpeed checkpoint folder (the top folder, a tag folder or one of its files), a Megatron-LM save "
                   "(its folder or an iteration folder), a NeMo .nemo (or the folder it extracts to) or NeMo 2 folder, a "
                   "torch.distributed.checkpoint folder (or its .metadata / a .distcp), or any checkpoint (never modified)")
        ->required();
    sub.add_option("-o,--output", r.output, "The file to write: .pth/.pt/.bin, or .safetensors");
    sub.add_option("--tag", a->tag, "DeepSpeed: the tag folder to merge (default: what `latest` names); Megatron: the iteration (1000 or iter_0001000)");
    sub.add_option("--dtype", a->dtype, "bfloat16|float16|float32|float64: cast floating-point tensors (default: as stored; DeepSpeed's fp32 masters)");
    sub.add_option("--strip-prefix", a->strip,
                   "Remove a leading prefix from every state-dict name (repeatable); with no value, the wrappers "
                   "module., _fsdp_wrapped_module., _checkpoint_wrapped_module., _orig_mod. wherever they stand")
        ->expected(0, 1)
        ->default_str("");
    sub.add_flag("--optimizer", r.optimizer,
                 "DeepSpeed: merge the optimizer state too, written as {\"model\": state dict, \"optimizer\": torch's "
                 "optimizer state_dict} (.pth)");
    CLI::Option* sub_unpad = sub.add_option("--unpad-vocab", a->unpad_vocab,
                   "Megatron: cut the word embeddings and output layer to the true vocabulary (default: args' vocab_size; or N)")
        ->expected(0, 1)
        ->default_str("");
    sub.add_option("--shard-size", a->shard_size, "Write shards of at most this size (2GB, 500MiB …) and a Hugging Face index");
    sub.add_option("--state-dict-key", a->state_dict_key, "Dotted path of the state dict (default: detected)");
    sub.add_flag("--dry-run", r.dry_run, "Say what would be written; write nothing");
    sub.add_flag("--no-verify", a->no_verify, "Do not read the output back and compare every tensor's content hash");
    sub.add_flag("--allow-expansion", r.allow_expansion,
                 "Write an output more than 1000 times the input (views that repeat elements, torch's expand, written out in full)");
    sub.add_flag("--force", r.force, "Overwrite OUT if it exists");
    sub.add_flag("--json", a->json, "One JSON object on stdout (docs/schema/merge.schema.json)");
    return [a, &global, sub_unpad]() {
        return reporting_errors("merge", a->json, a->request.input, [&] {
            ckpt::MergeRequest& rq = a->request;
            if (rq.output.empty() && !rq.dry_run) throw ckpt::Error(ckpt::ErrorKind::usage, rq.input, "--output is required (or --dry-run)");
            if (rq.output.empty()) rq.output = "merged.pth";
            for (const std::string& s : a->strip) {
                if (s.empty()) rq.strip_wrappers = true;
                else rq.strip.push_back(s);
            }
            if (!a->tag.empty()) rq.open.tag = a->tag;
            if (sub_unpad->count()) {
                if (a->unpad_vocab.empty()) rq.open.unpad_vocab = 0;
                else {
                    try {
                        size_t used = 0;
                        long long n = std::stoll(a->unpad_vocab, &used);
                        if (used != a->unpad_vocab.size() || n <= 0) throw std::invalid_argument("");
                        rq.open.unpad_vocab = n;
                    } catch (const std::exception&) {
                        throw ckpt::Error(ckpt::ErrorKind::usage, rq.input, "--unpad-vocab takes a positive row count, not \"" + a->unpad_vocab + "\"");
                    }
                }
            }
            if (!a->state_dict_key.empty()) rq.open.state_dict_key = a->state_dict_key;
            if (auto d = cast_dtype(a->dtype, rq.input)) rq.dtype = d;
            if (!a->shard_size.empty()) rq.shard_size = ckpt::parse_size(a->shard_size);
            rq.verify = !a->no_verify;
            rq.progress = progress_line(global, "merge");
            ckpt::MergeReport report = ckpt::merge(rq);
            print_report(report, a->json, global);
            return 0;
        });
    };
}

}  // namespace app

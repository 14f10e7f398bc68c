// ckpt-tool: the command table and the one place errors become exit codes
// (0 clean, 1 findings, 2 error).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "ckpt/atomic_file.hpp"
#include "ckpt/error.hpp"
#include "ckpt/report.hpp"
#include "command.hpp"
#include "guards.hpp"
#include "heap.hpp"
#include "usage_error.hpp"

namespace app {

bool GlobalOptions::color_enabled() const {
    if (color == "always") return true;
    if (color == "never") return false;
    const char* term = std::getenv("TERM");
    return isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR") && !(term && std::string(term) == "dumb");
}

namespace {

const Command k_commands[] = {
    {"inspect", "Show what a checkpoint holds: keys, dtypes, shapes, sizes, shared storage, the rest "
                "of a training checkpoint. Reads no tensor bytes.",
     "  ckpt-tool inspect model.pth\n"
     "  ckpt-tool inspect ckpt.pth --json > manifest.json\n"
     "  ckpt-tool inspect ckpt.pth --state-dict-key model --keys 'encoder.*'",
     setup_inspect},
    {"diff-keys", "Compare a checkpoint's state-dict keys, shapes and dtypes with a reference (checkpoint "
                  "or JSON manifest) and say which prefix change fixes them. Exit 1 when they differ.",
     "  ckpt-tool diff-keys ckpt.pth reference.pth\n"
     "  ckpt-tool inspect model.pth --json > manifest.json && ckpt-tool diff-keys ckpt.pth manifest.json\n"
     "  ckpt-tool diff-keys ckpt.pth reference.pth --ignore '*.num_batches_tracked' --json",
     setup_diff_keys},
    {"strip-prefix", "Rename state-dict keys (remove module. / _orig_mod. or a given prefix, or add one) "
                     "and keep everything else in the file exactly as it was.",
     "  ckpt-tool strip-prefix ddp.pth -o plain.pth\n"
     "  ckpt-tool strip-prefix lightning.ckpt --state-dict-key state_dict --prefix model. -o plain.ckpt\n"
     "  ckpt-tool strip-prefix plain.pth --add-prefix module. -o wrapped.pth\n"
     "  ckpt-tool strip-prefix ddp.pth --dry-run\n"
     "  ckpt-tool strip-prefix shards/ -o plain/          # a sharded checkpoint: every shard and the index",
     setup_strip_prefix},
    {"verify", "Check integrity (CRC-32, bounds, NaN/Inf, unsafe globals, optimizer fit) and, against a "
               "fingerprint or another checkpoint, numeric drift per tensor. Exit 1 on any finding.",
     "  ckpt-tool verify ckpt.pth\n"
     "  ckpt-tool verify ckpt.pth --write-fingerprint ckpt.fp.json\n"
     "  ckpt-tool verify ckpt.pth ckpt.fp.json --rtol 1e-5\n"
     "  ckpt-tool verify rank0.pth rank1.pth --exact",
     setup_verify},
    {"convert", "Write a checkpoint's state dict as safetensors (tied tensors once, aliases in __metadata__, "
                "views contiguous), safetensors as a .pth, or a whole .pth again (cast, or cut to its state dict, "
                "or in shards); every output read back and compared before it is kept.",
     "  ckpt-tool convert model.pth -o model.safetensors\n"
     "  ckpt-tool convert model.safetensors -o model.pth\n"
     "  ckpt-tool convert ckpt.pth --state-dict-key model -o model.safetensors --metadata source=run42\n"
     "  ckpt-tool convert train.pth -o train.bf16.pth --dtype bfloat16   # optimizer and args kept\n"
     "  ckpt-tool convert train.pth -o release/pytorch_model.bin --weights-only --max-shard-size 2GB",
     setup_convert},
    {"merge", "Merge the folder distributed training wrote (DeepSpeed ZeRO-1/2/3, torch.distributed.checkpoint / "
              "FSDP sharded) into one plain checkpoint, tensor by tensor, without Python or the framework: what "
              "zero_to_fp32 or dcp_to_torch_save give, frozen and tied parameters included; read back and compared.",
     "  ckpt-tool merge checkpoints/ -o model.pth                    # DeepSpeed: the tag `latest` names\n"
     "  ckpt-tool merge checkpoints/global_step1000 -o model.safetensors --strip-prefix\n"
     "  ckpt-tool merge dcp_ckpt/ -o full.pth                        # torch.distributed.checkpoint\n"
     "  ckpt-tool merge checkpoints/ -o train.pth --optimizer --tag global_step500\n"
     "  ckpt-tool merge checkpoints/ -o out/model.safetensors --dtype bfloat16 --shard-size 5GB\n"
     "  ckpt-tool merge checkpoints/ --dry-run --json",
     setup_merge},
    {"scan", "The gate before torch.load of a file you do not trust: default-deny, as weights_only=True is. Each "
             "file is read as every loader reads it (torch.load's zip, tar and pickle paths, torch.jit.load, "
             "torch.export.load, numpy.load, joblib.load, pickle.load), archives, compressed wrappers and pickles "
             "in tensors opened, TorchScript code that runs at load read; where two loaders read it differently, "
             "that is a finding. Nothing is run. Exit 1 on anything not allowed (dangerous or unknown).",
     "  ckpt-tool scan downloaded.pth\n"
     "  ckpt-tool scan --json *.pth *.bin\n"
     "  ckpt-tool scan checkpoints/global_step1000/          # every file of a folder\n"
     "  curl -sL https://example.org/model.bin | ckpt-tool scan -\n"
     "  ckpt-tool scan ckpt.pth --allow mylib.models.Net --allow-file trusted_globals.txt\n"
     "  ckpt-tool scan --format sarif *.pt > scan.sarif        # GitHub code scanning",
     setup_scan},
};

void setup_logging(const GlobalOptions& g) {
    auto logger = spdlog::stderr_color_mt("ckpt-tool");
    logger->set_pattern("ckpt-tool: %^%l%$: %v");
    logger->set_level(g.verbose ? spdlog::level::debug : g.quiet ? spdlog::level::err : spdlog::level::info);
    spdlog::set_default_logger(logger);
}

}  // namespace
}  // namespace app

int main(int argc, char** argv) {
    using namespace app;
    prepare_heap();
    guard_signals();
    CLI::App cli{"ckpt-tool: inspect, check and repair PyTorch checkpoints without running them."};
    cli.set_version_flag("--version", std::string("ckpt-tool ") + ckpt::tool_version());
    cli.require_subcommand(1);
    cli.fallthrough();  // the global options after the command too: `ckpt-tool scan -v F` as `ckpt-tool -v scan F`
    GlobalOptions global;
    cli.add_flag("-v,--verbose", global.verbose, "Debug detail on stderr");
    cli.add_flag("-q,--quiet", global.quiet, "Errors only on stderr");
    cli.add_option("--color", global.color, "Colour in text output")
        ->check(CLI::IsMember({"auto", "always", "never"}))
        ->capture_default_str();
    cli.footer("Exit codes: 0 clean, 1 findings, 2 error.\nRun 'ckpt-tool COMMAND --help' for a command's options and examples.");

    Runner run;
    for (const Command& c : k_commands) {
        CLI::App* sub = cli.add_subcommand(c.name, c.summary);
        sub->footer(std::string("Examples:\n") + c.examples);
        Runner r = c.setup(*sub, global);
        sub->callback([&run, r] { run = r; });
    }

    try {
        cli.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return cli.exit(e);  // --help, --version
        std::vector<std::string> commands;
        for (const Command& c : k_commands) commands.push_back(c.name);
        UsageError u = usage_error(cli, e, std::vector<std::string>(argv + 1, argv + argc), commands);
        if (u.json) print_error_json(u.command.c_str(), ckpt::Error(ckpt::ErrorKind::usage, "", u.message), "");
        std::cerr << "ckpt-tool: error: " << u.message << "\n";
        return 2;
    }
    setup_logging(global);
    ckpt::on_stale_temporary([](const std::string& path) {
        spdlog::warn("removed {}: a temporary a killed run left behind", ckpt::shown(path));
    });
    int code = 2;
    try {
        code = run ? run() : 2;
    } catch (const ckpt::Error& e) {
        spdlog::error("{}", ckpt::shown(e.what()));
        code = 2;
    } catch (const std::exception& e) {
        spdlog::error("{}", ckpt::shown(e.what()));
        code = 2;
    }
    // A report that did not reach standard output (a full disk, a closed pipe's reader gone) is an error.
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0) {
        spdlog::error("cannot write to standard output: the report is lost (a full disk? a pipe whose reader is gone?)");
        return 2;
    }
    return code;
}

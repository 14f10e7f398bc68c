// Opens a checkpoint with the installed library and prints its inspect report as JSON, through the
// public headers only; the test compares it with `ckpt-tool inspect --json` of the same file.
#include <iostream>

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>
#include <ckpt/inspect.hpp>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: consumer CKPT\n";
        return 2;
    }
    try {
        std::unique_ptr<ckpt::Checkpoint> c = ckpt::Checkpoint::open(argv[1]);
        ckpt::InspectReport report = ckpt::inspect(*c, {});
        std::cout << ckpt::to_json(report).dump(2) << "\n";
    } catch (const ckpt::Error& e) {
        std::cerr << e.what() << "\n";
        return 2;
    }
    return 0;
}

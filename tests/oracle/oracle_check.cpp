// The ATen oracle: for every tensor of every checkpoint named on the command line, the core's
// statistics (fingerprint.cpp) must agree with ATen's over the same bytes (at::from_blob, reduced in
// float64, through the LibTorch backend) within 1e-9 relative or 1e-12 absolute, and the NaN/Inf
// counts exactly. Prints one line per disagreement and "N tensors, M statistics agree"; exit 1 on any
// disagreement. Usage: oracle_check FILE.pth...
#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdio>
#include <optional>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "stats/torch_backend.hpp"
#include "io/zip.hpp"

using namespace ckpt;

namespace {
bool agree(const Stat& core, const Stat& aten) {
    if (!core || !aten) return !core && !aten;
    if (std::isnan(*core) || std::isnan(*aten)) return std::isnan(*core) && std::isnan(*aten);
    if (std::isinf(*core) || std::isinf(*aten)) return *core == *aten;
    double diff = std::fabs(*core - *aten);
    return diff <= 1e-12 || diff <= 1e-9 * std::fabs(*aten);
}
std::string text(const Stat& v) { return v ? repr_float(*v) : "none"; }
}  // namespace

int main(int argc, char** argv) {
    size_t tensors = 0, stats = 0, bad = 0, skipped = 0;
    try {
        const TorchBackend& backend = TorchBackend::get();
        for (int i = 1; i < argc; ++i) {
            auto c = Checkpoint::open(argv[i]);
            for (size_t ti = 0; ti < c->tensors().size(); ++ti) {
                const TensorInfo& t = c->tensors()[ti];
                const StorageInfo& s = c->storages()[t.storage];
                if (!s.record_present) continue;
                // The dtypes torch 1.13's ATen reduces (no complex32, float8, uint16+ or quantized).
                static const DType k_reducible[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16,
                                                    DType::complex64, DType::complex128, DType::uint8, DType::int8,
                                                    DType::int16, DType::int32, DType::int64, DType::boolean};
                if (std::find(std::begin(k_reducible), std::end(k_reducible), t.dtype) == std::end(k_reducible)) {
                    ++skipped;
                    continue;
                }
                RecordData data = c->record_data(*c->record_index(s.record));
                TensorStats core = tensor_stats(t, data.view());
                AtenStats aten = backend.stats(t.dtype, t.shape, t.stride, t.storage_offset, data.view());
                ++tensors;
                const char* names[] = {"mean", "std", "min", "max", "abs_mean", "l2"};
                const Stat* cv[] = {&core.mean, &core.std, &core.min, &core.max, &core.abs_mean, &core.l2};
                const Stat* av[] = {&aten.mean, &aten.std, &aten.min, &aten.max, &aten.abs_mean, &aten.l2};
                for (int k = 0; k < 6; ++k) {
                    ++stats;
                    if (!agree(*cv[k], *av[k])) {
                        ++bad;
                        std::printf("%s: tensor %zu (%s): %s core %s, ATen %s\n", argv[i], ti,
                                    std::string(dtype_name(t.dtype)).c_str(), names[k], text(*cv[k]).c_str(), text(*av[k]).c_str());
                    }
                }
                if (core.nan != aten.nan || core.inf != aten.inf) {
                    ++bad;
                    std::printf("%s: tensor %zu: nan/inf core %llu/%llu, ATen %llu/%llu\n", argv[i], ti,
                                (unsigned long long)core.nan, (unsigned long long)core.inf,
                                (unsigned long long)aten.nan, (unsigned long long)aten.inf);
                }
            }
        }
    } catch (const Error& e) {
        std::printf("error: %s\n", e.what());
        return 2;
    }
    std::printf("%zu tensors, %zu statistics: %zu disagree (%zu tensors of dtypes ATen cannot reduce skipped)\n",
                tensors, stats, bad, skipped);
    return bad || tensors == 0 ? 1 : 0;
}

// DeepSpeed's folders as files on disk: tag folders, `latest`, the rank files of a tag.
#include "formats/deepspeed_folder.hpp"

#include <algorithm>
#include <regex>

#include "ckpt/error.hpp"
#include "base/text_util.hpp"
#include "formats/dist.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

namespace {

std::string read_latest(const std::string& path) {
    std::string s = read_text_file(path, 4096, "a `latest` file");
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
    return s;
}

}  // namespace

DeepSpeedRankFiles deepspeed_rank_files(const std::string& dir) {
    static const std::regex model(R"(mp_rank_(\d+)_model_states\.pt)");
    static const std::regex model3(R"(zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt)");
    static const std::regex optim(R"((bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt)");
    static const std::regex pipe(R"(layer_\d+-model_\d+-model_states\.pt)");
    DeepSpeedRankFiles f;
    std::smatch m;
    auto tensor_parallel = [&](const std::string& name, const std::string& mp) {
        if (std::stoi(mp) != 0)
            throw Error(ErrorKind::unsupported, dir + "/" + name,
                        "is model-parallel rank " + mp + " (mp_rank_" + mp +
                            "): a pipeline stage or a tensor-parallel rank (DeepSpeed numbers mp = stage × TP + tp); "
                            "DeepSpeed's pipeline and tensor-parallel checkpoints are not read yet");
    };
    for (const std::string& n : dist::list_dir(dir)) {
        if (std::regex_match(n, m, pipe))
            throw Error(ErrorKind::unsupported, dir + "/" + n,
                        "is a pipeline-parallel layer file: pipeline checkpoints are not merged (yet)");
        if (std::regex_match(n, m, model3)) {
            tensor_parallel(n, m[2]);
            f.model_ranks[std::stoi(m[1])] = n;
        } else if (std::regex_match(n, m, model)) {
            tensor_parallel(n, m[1]);
            f.model = n;
        } else if (std::regex_match(n, m, optim)) {
            tensor_parallel(n, m[3]);
            int r = std::stoi(m[2]);
            if (f.optim.count(r))
                throw Error(ErrorKind::corrupt, dir + "/" + n, "and " + f.optim[r] + " both hold rank " + std::to_string(r) + "'s optimizer states");
            f.optim[r] = n;
            f.optim_prefixes.insert(m[1]);
        }
    }
    return f;
}

bool deepspeed_tag_folder(const std::string& dir) {
    for (const std::string& n : dist::list_dir(dir))
        if (text::ends_with(n, "_model_states.pt") || text::ends_with(n, "_optim_states.pt") || text::ends_with(n, "-model_states.pt")) return true;
    return false;
}

bool deepspeed_rank_name(const std::string& base) {
    static const std::regex rank(R"((bf16_)?zero_pp_rank_\d+_mp_rank_\d+_(optim|model)_states\.pt|mp_rank_\d+_model_states\.pt|layer_\d+-model(_\d+-model)?_states\.pt)");
    return std::regex_match(base, rank);
}

std::string deepspeed_folder_of(const std::string& path) {
    if (!deepspeed_rank_name(text::base_name(path)) || !dist::is_file(path)) return "";
    std::string dir = text::parent_dir(path);
    int ranks = 0;
    for (const std::string& n : dist::list_dir(dir)) ranks += deepspeed_rank_name(n);
    return ranks > 1 ? dir : "";  // a lone mp_rank_00_model_states.pt is a whole (ZeRO-0) checkpoint
}

std::string deepspeed_tag_dir(const std::string& given, const OpenOptions& options, DistInfo& info) {
    // Which tag folder: the one given, --tag, what `latest` names, or the only one there is.
    std::string top = given, tagdir;
    if (deepspeed_tag_folder(given)) {
        tagdir = given;
        info.tag = text::base_name(given);
        top = text::parent_dir(given);
        if (options.tag && *options.tag != info.tag)
            throw Error(ErrorKind::usage, given, "is the folder of tag " + info.tag + ", not of --tag " + *options.tag);
    }
    for (const std::string& n : dist::list_dir(top))
        if (dist::is_dir(top + "/" + n) && deepspeed_tag_folder(top + "/" + n)) info.tags.push_back(n);
    if (dist::is_file(top + "/latest")) info.latest = read_latest(top + "/latest");
    else if (dist::is_file(top + "/latest_universal")) info.latest = read_latest(top + "/latest_universal");  // ds_to_universal.py's
    if (tagdir.empty()) {
        std::string list;
        for (const std::string& t : info.tags) list += (list.empty() ? "" : ", ") + t;
        if (options.tag) info.tag = *options.tag;
        else if (!info.latest.empty()) info.tag = info.latest;
        else if (info.tags.size() == 1) info.tag = info.tags.front();
        else if (info.tags.empty()) throw Error(ErrorKind::format, given, "has a `latest` file but no tag folder of DeepSpeed rank files");
        else throw Error(ErrorKind::usage, given, "holds " + std::to_string(info.tags.size()) + " tags (" + list + ") and no `latest`: name one with --tag");
        if (std::find(info.tags.begin(), info.tags.end(), info.tag) == info.tags.end())
            throw Error(ErrorKind::corrupt, given,
                        "has no folder for tag " + info.tag + (options.tag ? " (--tag)" : " (named by `latest`)") +
                            (list.empty() ? std::string() : "; its tags: " + list));
        tagdir = top + "/" + info.tag;
    }
    return tagdir;
}

// param_shapes: a list per group of name → torch.Size (a single dict in some versions).
Shapes param_shapes(const Value* v, const std::string& file) {
    Shapes out;
    auto group = [&](const Value* d) {
        std::vector<std::pair<std::string, std::vector<int64_t>>> g;
        for (size_t i = 0; i < d->dict_size(); ++i) {
            auto name = dist::str_of(d->dict_key(i));
            auto shape = dist::ints_of(d->dict_value(i));
            if (!name || !shape) throw Error(ErrorKind::corrupt, file, "param_shapes holds something other than name → shape");
            g.emplace_back(std::string(*name), *shape);
        }
        out.push_back(std::move(g));
    };
    if (v && v->kind == ValueKind::dict) group(v);
    else if (v && v->kind == ValueKind::list)
        for (const Value* d : v->items()) {
            if (d->kind != ValueKind::dict) throw Error(ErrorKind::corrupt, file, "param_shapes is not a list of dicts");
            group(d);
        }
    else throw Error(ErrorKind::corrupt, file, "has no param_shapes (the names and shapes of the flattened parameters)");
    return out;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> named_shapes(const Value* d, const std::string& file, const char* what) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> out;
    if (!d || d->kind == ValueKind::none) return out;
    if (d->kind != ValueKind::dict) throw Error(ErrorKind::corrupt, file, std::string(what) + " is not a dict");
    for (size_t i = 0; i < d->dict_size(); ++i) {
        auto name = dist::str_of(d->dict_key(i));
        auto shape = dist::ints_of(d->dict_value(i));
        if (!name || !shape) throw Error(ErrorKind::corrupt, file, std::string(what) + " holds something other than name → shape");
        out.emplace_back(std::string(*name), *shape);
    }
    return out;
}

}  // namespace ckpt

// yaml_scalars: the block mappings of a NeMo config, and what it leaves out.
#include <catch2/catch.hpp>

#include "ckpt/error.hpp"
#include "io/yaml_scalars.hpp"

using namespace ckpt;

TEST_CASE("yaml: block mappings by dotted path; sequences, flow and block scalars skipped; comments and quotes") {
    const char* text =
        "# a NeMo model_config.yaml\n"
        "mcore_gpt: true\n"
        "tensor_model_parallel_size: 2   # a comment\n"
        "virtual_pipeline_model_parallel_size: null\n"
        "num_query_groups: ~\n"
        "activation: 'fast-swiglu'\n"
        "name: \"a # not a comment\"\n"
        "url: http://x#y\n"
        "tokenizer:\n"
        "  library: megatron\n"
        "  model: null\n"
        "  nested:\n"
        "    depth: 3\n"
        "data:\n"
        "  data_prefix:\n"
        "  - 0.5\n"
        "  - num_layers: 99\n"
        "  flow: [1, 2,\n"
        "     3]\n"
        "  text: |\n"
        "    hidden_size: 7\n"
        "  after: yes\n"
        "num_layers: 32\n"
        "config:\n"
        "\tbad: tab\n"
        "---\n"
        "second: doc\n";
    auto m = yaml_scalars(text, "model_config.yaml");
    CHECK(m.at("mcore_gpt") == "true");
    CHECK(m.at("tensor_model_parallel_size") == "2");
    CHECK(m.count("virtual_pipeline_model_parallel_size") == 0);
    CHECK(m.count("num_query_groups") == 0);
    CHECK(m.at("activation") == "fast-swiglu");
    CHECK(m.at("name") == "a # not a comment");
    CHECK(m.at("url") == "http://x#y");
    CHECK(m.at("tokenizer.library") == "megatron");
    CHECK(m.count("tokenizer.model") == 0);
    CHECK(m.at("tokenizer.nested.depth") == "3");
    CHECK(m.count("num_layers") == 1);
    CHECK(m.at("num_layers") == "32");  // not the 99 inside data's sequence
    CHECK(m.count("data.data_prefix.num_layers") == 0);
    CHECK(m.count("data.hidden_size") == 0);  // inside a block scalar
    CHECK(m.count("hidden_size") == 0);
    CHECK(m.at("data.after") == "yes");
    CHECK(m.at("second") == "doc");
    std::string deep;
    for (int i = 0; i < 70; ++i) deep += std::string(static_cast<size_t>(i) * 2, ' ') + "k" + std::to_string(i) + ":\n";
    CHECK_THROWS_AS(yaml_scalars(deep, "deep.yaml"), Error);
}

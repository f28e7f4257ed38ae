// Hugging Face checkpoint folders that are wrong in one way each (copies of the committed fixtures,
// edited): every one is refused by Model::load with its own Errc and a message naming the file and
// the key, tensor or dtype at fault. Also: both config.json spellings of RoPE, both merge forms and
// the recognised pre-tokenizers give the same model, and -m accepts a folder.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/hf_model.h"
#include "checkpoint/model_path.h"
#include "common/error.h"
#include "model/model.h"
#include "tests/support/hf_fixture.h"

using namespace kvzip;
using nlohmann::json;
using test::HfCopy;

namespace {

std::pair<Errc, std::string> load_error(const std::string& dir) {
  try {
    model::Model::load(dir);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  FAIL("the folder loaded: " << dir);
  return {};
}

void expect_error(const HfCopy& c, Errc code, std::initializer_list<std::string> needles) {
  auto [got, msg] = load_error(c.dir());
  INFO(msg);
  CHECK(errc_name(got) == std::string(errc_name(code)));
  for (const std::string& n : needles) CHECK_THAT(msg, Catch::Contains(n));
}

// Rewrites one safetensors file of the copy after `edit` changes its tensor list.
void edit_tensors(const HfCopy& c, const std::string& file,
                  const std::function<void(std::vector<test::StTensor>&)>& edit) {
  std::vector<test::StTensor> t = test::read_safetensors(c.path(file));
  edit(t);
  test::write_file_bytes(c.path(file), test::build_safetensors(t));
}

test::StTensor& find(std::vector<test::StTensor>& ts, const std::string& name) {
  for (test::StTensor& t : ts)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return ts.front();
}

}  // namespace

TEST_CASE("hf folder: missing files are Errc::not_found naming the file", "[checkpoint][hf]") {
  {
    HfCopy c("llama3");
    c.remove("config.json");
    expect_error(c, Errc::not_found, {"config.json"});
  }
  {
    HfCopy c("llama3");
    c.remove("tokenizer.json");
    expect_error(c, Errc::not_found, {"tokenizer.json", "tokenizer"});
  }
  {
    HfCopy c("llama3");
    c.remove("model.safetensors");
    expect_error(c, Errc::not_found, {"safetensors"});
  }
  {
    HfCopy c("qwen2");  // the index names a shard that is gone
    c.remove("model-00002-of-00004.safetensors");
    expect_error(c, Errc::not_found, {"model-00002-of-00004.safetensors"});
  }
  CHECK(load_error("/nonexistent/kvzip-hf-folder/").first == Errc::not_found);
}

namespace {

// One edit of a llama3 folder's JSON file that kvzip cannot run, and what the message must name.
struct Edit {
  const char* what;
  std::function<void(json&)> edit;
  std::vector<std::string> needles;
};

// Each edit alone, on a fresh copy: loading is Errc::unsupported naming the file and the needles.
void check_unsupported_edits(const char* file, const std::vector<Edit>& edits) {
  for (const Edit& e : edits) {
    INFO(e.what);
    HfCopy c("llama3");
    c.edit_json(file, e.edit);
    auto [code, msg] = load_error(c.dir());
    CHECK(code == Errc::unsupported);
    CHECK_THAT(msg, Catch::Contains(file));
    for (const std::string& n : e.needles) CHECK_THAT(msg, Catch::Contains(n));
  }
}

}  // namespace

TEST_CASE("hf folder: config.json that kvzip cannot run is Errc::unsupported naming the key",
          "[checkpoint][hf]") {
  const std::vector<Edit> edits = {
      {"unknown architecture",
       [](json& j) {
         j["model_type"] = "gemma2";
         j["architectures"] = {"Gemma2ForCausalLM"};
       },
       {"model_type 'gemma2'", "Gemma2ForCausalLM", "llama, mistral, qwen2"}},
      {"no LM head",
       [](json& j) { j["architectures"] = {"LlamaForSequenceClassification"}; },
       {"ForCausalLM"}},
      {"activation", [](json& j) { j["hidden_act"] = "gelu"; }, {"hidden_act", "gelu"}},
      {"rope type",
       [](json& j) { j["rope_scaling"]["rope_type"] = "yarn"; },
       {"rope_scaling.rope_type", "yarn"}},
      {"attention bias", [](json& j) { j["attention_bias"] = true; }, {"attention_bias"}},
      {"quantized",
       [](json& j) {
         j["quantization_config"] = {{"quant_method", "gptq"}};
       },
       {"gptq"}},
  };
  check_unsupported_edits("config.json", edits);
}

TEST_CASE("hf folder: inconsistent config.json is Errc::corrupt", "[checkpoint][hf]") {
  HfCopy c("llama3");
  c.edit_json("config.json", [](json& j) { j.erase("hidden_size"); });
  expect_error(c, Errc::corrupt, {"config.json", "hidden_size"});
  HfCopy d("llama3");
  d.edit_json("config.json", [](json& j) { j["num_key_value_heads"] = 3; });
  expect_error(d, Errc::corrupt, {"num_key_value_heads"});
  HfCopy e("llama3");
  e.edit_json("config.json", [](json& j) { j["rope_scaling"].erase("low_freq_factor"); });
  expect_error(e, Errc::corrupt, {"rope_scaling.low_freq_factor"});
}

TEST_CASE("hf folder: missing tensors, wrong shapes, dtypes and truncation are refused",
          "[checkpoint][hf]") {
  SECTION("missing tensor") {
    HfCopy c("llama3");
    edit_tensors(c, "model.safetensors", [](std::vector<test::StTensor>& t) {
      t.erase(std::find_if(t.begin(), t.end(),
                           [](auto& x) { return x.name == "model.layers.1.mlp.up_proj.weight"; }));
    });
    expect_error(c, Errc::corrupt, {"model.layers.1.mlp.up_proj.weight", "missing"});
  }
  SECTION("untied model without lm_head") {
    HfCopy c("llama3");
    edit_tensors(c, "model.safetensors", [](std::vector<test::StTensor>& t) {
      t.erase(std::find_if(t.begin(), t.end(), [](auto& x) { return x.name == "lm_head.weight"; }));
    });
    expect_error(c, Errc::corrupt, {"lm_head.weight", "tie_word_embeddings"});
  }
  SECTION("wrong shape") {
    HfCopy c("llama3");
    edit_tensors(c, "model.safetensors", [](std::vector<test::StTensor>& t) {
      find(t, "model.layers.0.self_attn.q_proj.weight").shape = {32, 128};
    });
    expect_error(c, Errc::corrupt,
                 {"model.layers.0.self_attn.q_proj.weight", "[32, 128]", "expected [64, 64]"});
  }
  SECTION("F8 and I64 tensors name the tensor and the dtype") {
    for (const char* dtype : {"F8_E4M3", "I64"}) {
      INFO(dtype);
      HfCopy c("llama3");
      edit_tensors(c, "model.safetensors", [&](std::vector<test::StTensor>& t) {
        test::StTensor& x = find(t, "model.layers.0.mlp.down_proj.weight");
        const size_t n = x.data.size() / 2;  // bf16 elements
        x.dtype = dtype;
        x.data.assign(n * (std::string(dtype) == "I64" ? 8 : 1), 0);
      });
      expect_error(c, Errc::unsupported,
                   {"model.layers.0.mlp.down_proj.weight", dtype, "F32, F16, BF16"});
    }
  }
  SECTION("truncated safetensors") {
    HfCopy c("llama3");
    std::vector<uint8_t> b = test::read_file_bytes(c.path("model.safetensors"));
    b.resize(b.size() - 1000);
    test::write_file_bytes(c.path("model.safetensors"), b);
    expect_error(c, Errc::truncated, {"model.safetensors", "truncated"});
  }
  SECTION("index that puts a tensor in the wrong shard") {
    HfCopy c("qwen2");
    c.edit_json("model.safetensors.index.json", [](json& j) {
      j["weight_map"]["model.norm.weight"] =
          j["weight_map"]["model.norm.weight"] == "model-00001-of-00004.safetensors"
              ? "model-00002-of-00004.safetensors"
              : "model-00001-of-00004.safetensors";
    });
    expect_error(c, Errc::corrupt, {"model.norm.weight", "weight_map"});
  }
}

TEST_CASE("hf folder: tokenizers kvzip does not implement are Errc::unsupported",
          "[checkpoint][hf]") {
  const std::vector<Edit> edits = {
      {"byte_fallback with a byte-level layout",
       [](json& j) { j["model"]["byte_fallback"] = true; },
       {"byte_fallback", "not supported"}},
      {"Metaspace",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}};
       },
       {"Metaspace", "byte_fallback"}},
      {"unknown regex",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+"; },
       {"pre_tokenizer", "Split"}},
      {"Unigram", [](json& j) { j["model"]["type"] = "Unigram"; }, {"Unigram"}},
      {"ignore_merges off",
       [](json& j) { j["model"]["ignore_merges"] = false; },
       {"ignore_merges", "llama-bpe"}},
      {"normalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       {"Lowercase"}},
  };
  check_unsupported_edits("tokenizer.json", edits);
  HfCopy c("llama3");  // a token id the model cannot embed
  c.edit_json("tokenizer.json", [](json& j) { j["model"]["vocab"]["Ġzzz"] = 5000; });
  expect_error(c, Errc::corrupt, {"5000", "vocab_size"});
}

TEST_CASE("hf folder: equivalent spellings load the same model", "[checkpoint][hf]") {
  const auto base = model::Model::load(test::hf_golden("llama3"));
  SECTION("transformers 5 rope_parameters instead of rope_theta + rope_scaling") {
    HfCopy c("llama3");
    c.edit_json("config.json", [](json& j) {
      json rp = j["rope_scaling"];
      rp["rope_theta"] = j["rope_theta"];
      j.erase("rope_scaling");
      j.erase("rope_theta");
      j["rope_parameters"] = rp;
    });
    const ModelConfig a = model::hf_config(c.dir()), &b = base->config();
    CHECK(a.rope_base == b.rope_base);
    CHECK(a.rope_scaling.kind == b.rope_scaling.kind);
    CHECK(a.rope_scaling.factor == b.rope_scaling.factor);
    CHECK(a.rope_scaling.original_context == b.rope_scaling.original_context);
  }
  SECTION("merges as \"a b\" strings instead of [a, b] lists") {
    HfCopy c("llama3");
    c.edit_json("tokenizer.json", [](json& j) {
      for (json& m : j["model"]["merges"])
        m = m[0].get<std::string>() + " " + m[1].get<std::string>();
    });
    CHECK(model::Model::load(c.dir())->fingerprint().same_model(base->fingerprint()));
  }
  SECTION("chat template in tokenizer_config.json instead of chat_template.jinja") {
    HfCopy c("llama3");
    const std::vector<uint8_t> t = test::read_file_bytes(c.path("chat_template.jinja"));
    c.remove("chat_template.jinja");
    c.edit_json("tokenizer_config.json",
                [&](json& j) { j["chat_template"] = std::string(t.begin(), t.end()); });
    CHECK(model::Model::load(c.dir())->tokenizer().chat_template() ==
          base->tokenizer().chat_template());
  }
  SECTION("explicit add_bos_token = false wins over the post-processor") {
    HfCopy c("llama3");
    c.edit_json("tokenizer_config.json", [](json& j) { j["add_bos_token"] = false; });
    CHECK_FALSE(model::Model::load(c.dir())->tokenizer().add_bos());
  }
  SECTION("the SmolLM and GPT-2 pre-tokenizers are recognised") {
    HfCopy c("mistral");
    c.edit_json("tokenizer.json", [](json& j) {
      json bl = j["pre_tokenizer"];
      j["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, bl}}};
    });
    CHECK(model::Model::load(c.dir())->tokenizer().pre() == "smollm");
    c.edit_json("tokenizer.json", [](json& j) {
      json bl = j["pre_tokenizer"]["pretokenizers"][1];
      bl["use_regex"] = false;
      json split = {{"type", "Split"},
                    {"pattern",
                     {{"Regex",
                       "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                       "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}}},
                    {"behavior", "Isolated"},
                    {"invert", false}};
      j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, bl}}};
    });
    CHECK(model::Model::load(c.dir())->tokenizer().pre() == "gpt2");
  }
}

TEST_CASE("hf folder: fingerprints follow the weight bytes and the tokenizer", "[checkpoint][hf]") {
  const ModelFingerprint base = model::load_hf_model(test::hf_golden("llama3")).fingerprint;
  CHECK(base.arch == "llama");
  CHECK(model::load_hf_model(test::hf_golden("llama3")).fingerprint.same_model(base));
  HfCopy w("llama3");
  edit_tensors(w, "model.safetensors", [](std::vector<test::StTensor>& t) {
    find(t, "model.layers.1.mlp.down_proj.weight").data[10] ^= 1;
  });
  const ModelFingerprint fw = model::load_hf_model(w.dir()).fingerprint;
  CHECK(fw.tokenizer_hash == base.tokenizer_hash);
  CHECK(fw.weights_hash != base.weights_hash);
  HfCopy t("llama3");
  t.edit_json("tokenizer.json",
              [](json& j) { j["model"]["merges"].erase(j["model"]["merges"].size() - 1); });
  const ModelFingerprint ft = model::load_hf_model(t.dir()).fingerprint;
  CHECK(ft.tokenizer_hash != base.tokenizer_hash);
  CHECK(ft.weights_hash == base.weights_hash);
}

TEST_CASE("hf folder: -m and $KVZIP_MODEL accept a checkpoint folder", "[checkpoint][hf]") {
  const std::string dir = test::hf_golden("qwen2");
  CHECK(model::resolve_model_path(dir) == dir);
  try {
    model::resolve_model_path("/nonexistent/kvzip-model");
    FAIL("resolved");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_found);
    CHECK_THAT(e.what(), Catch::Contains("Hugging Face"));
  }
}

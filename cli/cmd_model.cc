// `kvzip generate`, `kvzip tokenize`, `kvzip perplexity`: the model runtime on its own, without
// any cache file. Generated text streams to stdout as tokens arrive (UTF-8 kept whole).
// With --rkv-budget, generate runs on a ragged cache bounded by R-KV (or streaming) from the start.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <span>
#include <sstream>

#include "cache/ragged_cache.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/rkv_options.h"
#include "common/error.h"
#include "kernels/device.h"
#include "model/gpu_forward.h"

namespace kvzip::cli {
namespace {

struct GenerateOpts {
  std::string model, prompt, file, system;
  uint32_t n = 128, threads = 0, top_k = 0;
  std::string device = "cpu", matmul = "fast", attention = "bf16";
  float temp = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool chat = false, stats = false, no_key_tiles = false;
  RkvOptions rkv;
};

// The prompt's tokens: the chat template's turn with --chat, else BOS (if the model adds one)
// and the plain text.
std::vector<int32_t> generate_prompt(const model::Model& model, const GenerateOpts& o,
                                     const std::string& text) {
  if (o.chat) return model.chat().chat(o.system, text);
  std::vector<int32_t> prompt;
  if (model.tokenizer().add_bos() && model.tokenizer().bos() >= 0)
    prompt.push_back(model.tokenizer().bos());
  auto ids = model.tokenizer().encode(text, /*parse_special=*/false);
  prompt.insert(prompt.end(), ids.begin(), ids.end());
  return prompt;
}

model::GenerateParams generate_params(const model::Model& model, const GenerateOpts& o,
                                      const std::optional<model::RkvParams>& rkv) {
  model::GenerateParams gp;
  gp.rkv = rkv;
  gp.max_tokens = o.n;
  gp.sampling = model::SamplingParams{o.temp, o.top_k, o.top_p, o.seed};
  // A plain continuation runs to the end of text; the chat stop set of a base model also ends at a
  // newline, which is for answers to questions, not for continuing a text.
  if (o.chat) {
    gp.stop_tokens = model.chat().stop_tokens();
  } else {
    for (int32_t id : {model.tokenizer().eos(), model.tokenizer().eot()})
      if (id >= 0) gp.stop_tokens.push_back(id);
  }
  return gp;
}

model::GenerateResult generate_on_cpu(const model::Model& model, const GenerateOpts& o,
                                      std::span<const int32_t> prompt,
                                      const model::GenerateParams& gp,
                                      const model::TokenCallback& on_token) {
  model::ForwardOptions fo;
  fo.threads = o.threads;
  fo.matmul = o.matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  model::Forward fwd(model.weights(), fo);
  // A long prompt is a document: bf16 products as compress's document prefill (Fast path, AVX-512
  // BF16 CPUs; decode steps keep fp32, docs/cpu-kernels.md).
  const model::PromptBf16Scope bf16(fwd, o.attention == "bf16");
  const model::CacheShape shape = model::cache_shape(model.config());
  std::unique_ptr<model::AttentionCache> cache;
  if (gp.rkv)  // empty ragged cache: the bound holds from the first token, no dense copy
    cache = std::make_unique<model::RaggedKvCache>(
        shape, 0, std::vector<uint32_t>(size_t(shape.n_layers) * shape.n_kv_heads, 0),
        static_cast<uint32_t>(prompt.size()) + gp.rkv->budget + gp.rkv->buffer);
  else {  // every answer token attends to the whole prompt: keep its keys transposed once
    auto dense =
        std::make_unique<model::KvCache>(shape, static_cast<uint32_t>(prompt.size()) + o.n);
    dense->keep_key_tiles(!o.no_key_tiles);
    cache = std::move(dense);
  }
  return generate(fwd, *cache, prompt, gp, on_token);
}

void print_generate_stats(const model::Model& model, const model::GenerateResult& r,
                          const model::GenerateParams& gp, size_t n_prompt, double prefill_s,
                          double decode_s, kernels::Device device) {
  std::fprintf(stderr,
               "prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens, %.1f tok/s\n",
               n_prompt, prefill_s, n_prompt / prefill_s, r.tokens.size(),
               r.tokens.size() > 1 ? (r.tokens.size() - 1) / decode_s : 0.0);
  if (device != kernels::Device::Cuda)
    std::fprintf(stderr, "matmul %s\n",
                 kernels::matmul_kernels(model::ForwardOptions{}.matmul).c_str());
  std::fprintf(stderr, "weights %s\n",
               model.weights_in_memory() ? "read into memory" : "mapped from the file");
  if (gp.rkv)
    std::fprintf(stderr, "%s: %u compressions evicted %llu rows (budget %u per head)\n",
                 gp.rkv->streaming ? "streaming"
                 : gp.rkv->learned ? "kvzap"
                                   : "R-KV",
                 r.compressions, static_cast<unsigned long long>(r.evicted), gp.rkv->budget);
}

void run_generate(const GenerateOpts& o) {
  if (o.prompt.empty() == o.file.empty())
    throw Error(Errc::invalid_argument, "generate: give exactly one of -p TEXT or -f FILE");
  const std::optional<model::RkvParams> rkv = rkv_params(o.rkv);  // bad options fail before loading
  const std::string text = o.file.empty() ? o.prompt : read_text(o.file, "prompt file");
  if (o.file.empty()) check_text(text, "the prompt");
  const kernels::Device device = kernels::parse_device(o.device.c_str());
  auto model = load_model(o.model, o.threads);
  check_rkv_scorer(o.rkv, *model);
  const std::vector<int32_t> prompt = generate_prompt(*model, o, text);
  const model::GenerateParams gp = generate_params(*model, o, rkv);
  model::StreamDecoder dec(model->tokenizer());
  if (!o.chat) std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  auto t_first = t0;
  bool first = true;
  auto on_token = [&](int32_t tok) {
    if (first) t_first = std::chrono::steady_clock::now(), first = false;
    const std::string piece = dec.push(tok);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  const model::GenerateResult r = [&] {
    if (device != kernels::Device::Cuda) return generate_on_cpu(*model, o, prompt, gp, on_token);
    model::GpuForward gpu(model->weights());
    model::GpuCache cache(model::cache_shape(model->config()),
                          static_cast<uint32_t>(prompt.size()) + o.n);
    return generate(gpu, cache, prompt, gp, on_token);
  }();
  const std::string tail = dec.finish();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  if (o.stats) {
    const auto t1 = std::chrono::steady_clock::now();
    print_generate_stats(*model, r, gp, prompt.size(),
                         std::chrono::duration<double>(t_first - t0).count(),
                         std::chrono::duration<double>(t1 - t_first).count(), device);
  }
}

struct TokenizeOpts {
  std::string model, text;
  bool decode = false, special = false;
};

void run_tokenize(const TokenizeOpts& o) {
  auto model = load_model(o.model, 1);
  const model::Tokenizer& tok = model->tokenizer();
  if (o.decode) {
    std::istringstream in(o.text);
    std::vector<int32_t> ids;
    std::string word;
    while (in >> word) {
      char* end = nullptr;
      const long v = std::strtol(word.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v >= tok.vocab_size())
        throw Error(Errc::invalid_argument, "tokenize --decode: '" + word +
                                                "' is not a token id in [0, " +
                                                std::to_string(tok.vocab_size()) + ")");
      ids.push_back(static_cast<int32_t>(v));
    }
    const std::string s = tok.decode(ids);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
    return;
  }
  std::string out;
  for (int32_t id : tok.encode(o.text, o.special)) {
    if (!out.empty()) out += ' ';
    out += std::to_string(id);
  }
  std::printf("%s\n", out.c_str());
}

struct PerplexityOpts {
  std::string model, file, matmul = "fast";
  uint32_t ctx = 512, threads = 0;
  bool second_half = false;
};

void run_perplexity(const PerplexityOpts& o) {
  const std::string text = read_text(o.file, "text file");
  auto model = load_model(o.model, o.threads);
  const auto ids = model->tokenizer().encode(text, false);
  model::ForwardOptions fo;
  fo.threads = o.threads;
  fo.matmul = o.matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  model::Forward fwd(model->weights(), fo);
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t bos = model->tokenizer().add_bos() ? model->tokenizer().bos() : -1;
  model::PerplexityResult r = o.second_half ? model::perplexity_second_half(fwd, ids, o.ctx, bos)
                                            : model::perplexity(fwd, ids, o.ctx, bos);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("perplexity %.4f (%llu tokens scored in %u windows of %u, mean NLL %.5f nats)\n",
              r.perplexity, static_cast<unsigned long long>(r.scored), r.windows, o.ctx,
              r.mean_nll);
  std::fprintf(stderr, "%zu tokens in %.2f s (%.1f tok/s)\n", ids.size(), s, ids.size() / s);
}

}  // namespace

void add_model_commands(CLI::App& app) {
  auto g = std::make_shared<GenerateOpts>();
  auto* gen = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  add_model_option(gen, g->model);
  gen->add_option("-p,--prompt", g->prompt, "Prompt text");
  gen->add_option("-f,--file", g->file, "Read the prompt from FILE ('-' = stdin)");
  gen->add_option("-n,--max-tokens", g->n, "Tokens to generate at most")->capture_default_str();
  gen->add_flag("--chat", g->chat, "Wrap the prompt in the model's chat template");
  gen->add_option("--system", g->system, "System prompt for --chat (default: the template's)");
  gen->add_option("--temp", g->temp, "Temperature; 0 = greedy")->capture_default_str();
  gen->add_option("--top-k", g->top_k, "Keep the k most likely tokens; 0 = off");
  gen->add_option("--top-p", g->top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  gen->add_option("--seed", g->seed, "Random seed for sampling")->capture_default_str();
  add_threads_option(gen, g->threads);
  gen->add_option("--device", g->device, "cpu | cuda")->capture_default_str();
  gen->add_flag("--stats", g->stats, "Print prefill and decode speed to stderr");
  gen->add_option("--matmul", g->matmul,
                  "fast | exact: int8-rounded activations where the CPU has the kernels, or fp32")
      ->check(CLI::IsMember({"fast", "exact"}))
      ->capture_default_str();
  gen->add_option(
         "--attention", g->attention,
         "bf16 | f32: the prompt's attention products on bf16 operands (with --matmul fast, where "
         "the CPU has AVX-512 BF16: as compress's document prefill) or fp32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  gen->add_flag("--no-key-tiles", g->no_key_tiles,
                "Keep the cache's keys once in memory (by default they are also kept transposed, "
                "for faster decoding after a long prompt at about the K bytes again)");
  add_rkv_options(gen, g->rkv);
  gen->callback([g] { run_generate(*g); });

  auto t = std::make_shared<TokenizeOpts>();
  auto* tk = app.add_subcommand("tokenize", "Print the token ids of TEXT (or --decode ids)");
  tk->add_option("-m,--model", t->model, "GGUF model file");
  tk->add_option("text", t->text, "Text to tokenize, or space-separated ids with --decode")
      ->required();
  tk->add_flag("--decode", t->decode, "Decode token ids back to text");
  tk->add_flag("--special", t->special, "Parse special tokens such as <|im_start|> in TEXT");
  tk->callback([t] { run_tokenize(*t); });

  auto p = std::make_shared<PerplexityOpts>();
  auto* pp = app.add_subcommand("perplexity", "Perplexity of a text file under the model");
  pp->add_option("-m,--model", p->model, "GGUF model file");
  pp->add_option("-f,--file", p->file, "UTF-8 text file ('-' = stdin)")->required();
  pp->add_option("-c,--ctx", p->ctx, "Window length in tokens")->capture_default_str();
  pp->add_flag("--second-half", p->second_half,
               "Score only each window's second half, windows cut as llama.cpp's llama-perplexity "
               "cuts them");
  pp->add_option("--matmul", p->matmul,
                 "fast | exact: int8-rounded activations where the CPU has the kernels, or fp32")
      ->check(CLI::IsMember({"fast", "exact"}))
      ->capture_default_str();
  add_threads_option(pp, p->threads);
  pp->callback([p] { run_perplexity(*p); });
}

}  // namespace kvzip::cli

// Tokenizer throughput (MB/s of UTF-8 input): encode on kitoken's corpora (English/code mix,
// multilingual UTF-8), 1 MB of spaces, decode, chat rendering, and vocabulary loading.
// Data: $K3_TOKENIZER_DIR, else ../shared/data/kimi-tokenizer next to the source tree.
// tiktoken's number on the same corpus: bench/tokenizer_tiktoken.py.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/chat_k3.h"
#include "tokenizer/tokenizer.h"

namespace {

std::filesystem::path data_dir() {
  if (const char* e = std::getenv("K3_TOKENIZER_DIR")) return e;
  return std::filesystem::path(__FILE__).parent_path() / "../../shared/data/kimi-tokenizer";
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const k3::Tokenizer& tok() {
  static const k3::Tokenizer t = k3::Tokenizer::from_files(data_dir() / "tiktoken.model");
  return t;
}

std::string repeat_to(const std::string& s, std::size_t n) {
  std::string o;
  while (o.size() < n) o += s;
  return o;
}

void run_encode(benchmark::State& st, const std::string& text) {
  const auto& t = tok();
  std::size_t n_ids = 0;
  for (auto _ : st) {
    auto ids = t.encode(text);
    n_ids = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * text.size()));
  st.counters["ids"] = static_cast<double>(n_ids);
}

void BM_EncodeMixed(benchmark::State& st) {
  static const std::string text = repeat_to(read(data_dir() / "testdata/mixed_input.txt"), 1 << 20);
  run_encode(st, text);
}
void BM_EncodeUtf8Multilingual(benchmark::State& st) {
  static const std::string text = repeat_to(read(data_dir() / "testdata/utf8_input.txt"), 1 << 20);
  run_encode(st, text);
}
void BM_EncodeSpaces1MB(benchmark::State& st) {
  static const std::string text(1 << 20, ' ');
  run_encode(st, text);
}
void BM_EncodeNoSpaces1MB(benchmark::State& st) {
  static const std::string text = repeat_to("abcdefghij", 1 << 20);
  run_encode(st, text);
}
void BM_Decode(benchmark::State& st) {
  static const std::string text = repeat_to(read(data_dir() / "testdata/utf8_input.txt"), 1 << 20);
  static const std::vector<int32_t> ids = tok().encode(text);
  for (auto _ : st) benchmark::DoNotOptimize(tok().decode(ids).data());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * text.size()));
}
void BM_ChatRender(benchmark::State& st) {
  const auto msgs = nlohmann::ordered_json::parse(
      R"([{"role":"user","content":"What is the weather in Paris today? Please answer briefly."},
          {"role":"assistant","content":"Sunny.","reasoning_content":"The user asks about weather."},
          {"role":"user","content":"And tomorrow?"}])");
  for (auto _ : st) benchmark::DoNotOptimize(k3::render_chat(tok(), msgs).data());
}
void BM_LoadVocab(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(k3::Tokenizer::from_files(data_dir() / "tiktoken.model").n_ranks());
}

BENCHMARK(BM_EncodeMixed)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeUtf8Multilingual)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeSpaces1MB)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeNoSpaces1MB)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ChatRender)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LoadVocab)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// specdec C++ example: the RAII wrapper of include/specdec.hpp around the C API.
//
//   specdec-example-cpp EXPORT_DIR [--text "PROMPT" | --ids 5,6,7,1] [--max-new-tokens N] [--gamma G|auto]
//                       [--draft auto|none|lookup|draft|lookup,draft|...] [--temperature T] [--top-k K]
//                       [--top-p P] [--lenience L] [--seed S] [--provider auto|cpu|cuda|tensorrt] [--threads N]
//
// Same output lines as the C example (ids: / text: / stream: / stream_ids: / stream_text: / stats:).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "specdec.hpp"

namespace {

long long ll(int64_t v) { return static_cast<long long>(v); }

void print_stats(const char *label, const specdec::Stats &s)
{
    std::printf("%s: new_tokens=%lld target_calls=%lld draft_calls=%lld ort_runs=%lld accepted=%lld/%lld "
                "acceptance_rate=%.3f tokens_per_target_call=%.2f stop=%s sources: target_only_rounds=%lld "
                "lookup=%lld/%lld/%lld model=%lld/%lld/%lld chain=%lld/%lld time_ms: total=%.2f encoder=%.2f "
                "draft=%.2f target=%.2f host=%.2f\n",
                label, ll(s.new_tokens), ll(s.target_calls), ll(s.draft_calls), ll(s.ort_runs), ll(s.accepted),
                ll(s.proposed), s.acceptance_rate, s.tokens_per_target_call, specdec_stop_reason_name(s.stop_reason),
                ll(s.target_only_rounds), ll(s.lookup_rounds), ll(s.lookup_proposed), ll(s.lookup_accepted),
                ll(s.model_rounds), ll(s.model_proposed), ll(s.model_accepted), ll(s.chain_proposed),
                ll(s.chain_accepted), s.total_s * 1e3, s.encoder_s * 1e3, s.draft_s * 1e3, s.target_s * 1e3,
                s.host_s * 1e3);
}

std::string join(const std::vector<int32_t> &ids)
{
    std::ostringstream out;
    for (size_t i = 0; i < ids.size(); i++)
        out << (i ? " " : "") << ids[i];
    return out.str();
}

std::vector<int32_t> parse_ids(const std::string &s)
{
    std::vector<int32_t> ids;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ','))
        ids.push_back(static_cast<int32_t>(std::stol(item)));
    return ids;
}

}  // namespace

int main(int argc, char **argv)
{
    std::string export_dir, text, provider = "cpu", draft;
    bool have_text = false;
    int threads = 0;
    std::vector<int32_t> prompt_ids;
    specdec::Params params;

    for (int a = 1; a < argc; a++) {
        std::string arg = argv[a];
        if (arg.compare(0, 2, "--") != 0) { export_dir = arg; continue; }
        if (a + 1 >= argc) { std::cerr << "error: " << arg << " needs a value\n"; return 2; }
        std::string val = argv[++a];
        if (arg == "--text") { text = val; have_text = true; }
        else if (arg == "--ids") prompt_ids = parse_ids(val);
        else if (arg == "--max-new-tokens") params.max_new_tokens = std::atoi(val.c_str());
        else if (arg == "--gamma") params.gamma = val == "auto" ? SPECDEC_GAMMA_AUTO : std::atoi(val.c_str());
        else if (arg == "--draft") draft = val;
        else if (arg == "--temperature") params.temperature = std::atof(val.c_str());
        else if (arg == "--top-k") params.top_k = std::atoi(val.c_str());
        else if (arg == "--top-p") params.top_p = std::atof(val.c_str());
        else if (arg == "--lenience") params.lenience = std::atof(val.c_str());
        else if (arg == "--seed") params.seed = std::strtoull(val.c_str(), nullptr, 10);
        else if (arg == "--provider") provider = val;
        else if (arg == "--threads") threads = std::atoi(val.c_str());
        else { std::cerr << "error: unknown option " << arg << "\n"; return 2; }
    }
    if (!draft.empty())
        params.draft = draft.c_str();       // `draft` outlives every call below
    if (export_dir.empty() || have_text == !prompt_ids.empty()) {
        std::cerr << "usage: " << argv[0] << " EXPORT_DIR (--text PROMPT | --ids 5,6,7,1) [options]\n";
        return 2;
    }

    try {
        specdec::Session session(export_dir,
                                 "{\"provider\": \"" + provider + "\", \"threads\": " + std::to_string(threads) + "}");
        specdec::Info info = session.info();
        std::printf("specdec %s (C API %d, C++), provider %s, gamma_max %d, max_length %d, vocab %d\n",
                    specdec_version(), SPECDEC_API_VERSION, info.provider, static_cast<int>(info.gamma_max),
                    static_cast<int>(info.max_length), static_cast<int>(info.vocab_size));

        specdec::Stats stats;
        if (have_text)
            std::printf("text: %s\n", session.generate_text(text, params, &stats).c_str());
        else
            std::printf("ids: %s\n", join(session.generate_ids(prompt_ids, params, &stats)).c_str());
        print_stats("stats", stats);

        std::vector<int32_t> streamed;
        std::string streamed_text;
        auto on_piece = [&](const specdec::Piece &piece) {
            std::printf("%s[%s]", streamed.empty() ? "stream: " : " ", join(piece.token_ids).c_str());
            streamed.insert(streamed.end(), piece.token_ids.begin(), piece.token_ids.end());
            streamed_text += piece.text;
            return true;     // keep going
        };
        if (have_text)
            session.stream_text(text, params, on_piece, &stats);
        else
            session.stream_ids(prompt_ids, params, on_piece, &stats);
        std::printf("\nstream_ids: %s\nstream_text: %s\n", join(streamed).c_str(), streamed_text.c_str());
        print_stats("stream_stats", stats);

        // a failed call throws, and the session keeps working afterwards
        specdec::Params bad = params;
        bad.gamma = info.gamma_max + 1;
        try {
            session.generate_ids(prompt_ids.empty() ? std::vector<int32_t>{5, 1} : prompt_ids, bad);
        } catch (const specdec::Error &err) {
            std::printf("expected error: %s\n", err.what());
        }
    } catch (const specdec::Error &err) {      // ~Session has closed the handle
        std::cerr << "error: " << err.what() << "\n";
        return 1;
    }
    return 0;
}

// The request handlers behind the routes of http_server.cpp. Each parses and validates its body
// (ApiError on bad input, thrown before any byte of the response is sent), translates it into a
// SeqRequest, and writes the OpenAI-shaped answer through httplib's chunked content provider,
// started only once the sequence is queued (so validation, 401/404/413/429/503 keep their
// status): one JSON object preceded by "\n" heartbeats (JSON-legal leading whitespace, one per
// idle second, which detect a client that hung up), or an SSE stream with ": keep-alive"
// comments. An engine error after the 200 header is an OpenAI error object in the body (SSE:
// `data: {"error": ...}` then [DONE]).
#pragma once
#include <httplib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "serve_context.h"

namespace k3::server {

/// POST /v1/chat/completions.
void handle_chat(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// POST /v1/completions.
void handle_completion(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// POST /tokenize: {"prompt": text} (encoded as /v1/completions does) or {"messages": [...],
/// tools, reasoning_effort, chat_template_kwargs} (rendered as /v1/chat/completions does)
/// -> {"count", "max_model_len", "tokens", "token_strs": null}.
void handle_tokenize(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// POST /detokenize: {"tokens": [ids]} -> {"prompt": text} (invalid UTF-8 replaced by U+FFFD).
void handle_detokenize(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);

/// GET /slots: [{id, is_processing, n_ctx, n_kept_tokens}].
void handle_slots_list(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// POST /slots/{id}?action=save|restore (body {"filename"}) | erase: llama-server's shapes
/// ({id_slot, filename, n_saved|n_restored, n_written|n_read, timings}); 501 without
/// --slot-save-path, 400 naming the field for a bad id, action or file name, or a foreign /
/// corrupt file, 404 for a missing file.
void handle_slot_action(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);

/// POST /v1/responses (OpenAI Responses API, agent_api.h): translated onto the chat request;
/// a JSON response object, or with "stream": true its typed SSE events (`event: TYPE`).
/// previous_response_id not in the store: 404 naming it.
void handle_responses(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// POST /v1/messages (Anthropic Messages API, agent_api.h): a message object or its SSE events.
void handle_messages(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// POST /v1/messages/count_tokens: {"input_tokens": N} of the rendered prompt.
void handle_count_tokens(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// GET /props (llama-server): default_generation_settings {n_ctx, params}, total_slots, ...
void handle_props(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// GET /version: {"version", "model", "created"}.
void handle_version(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// POST /apply-template (llama-server): a chat body -> {"prompt": the rendered K3 prompt text}.
void handle_apply_template(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);
/// /v1/embeddings, /embedding(s), /infill, /v1/rerank, /rerank, /v1/reranking, /reranking:
/// ApiError 404 saying K3 has no such head.
void handle_no_head(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res);

/// ApiError 404 (param "model") unless `model` is empty or the served id.
void check_model(const ServeContext& ctx, const std::string& model);

/// render_chat of a parsed chat request; the renderer's k3::Error becomes ApiError 400 with
/// param "response_format" when it names that field, else "messages".
std::vector<int32_t> render_chat_request(const ServeContext& ctx, const ChatRequest& cr);
/// render_chat_request for a request that may hold images: its image_url parts are taken out
/// of cr.messages (image_parts.h, HTTP-side: data URL -> bytes), then the runtime preprocesses
/// them, runs the tower and renders the media blocks (image_prompt_from_bytes); *images is set
/// when there were any (null otherwise). Errors: ApiError 400/413 naming messages[i].content[k]
/// (bad data URL, over a limit, undecodable image), 400 for a checkpoint without a tower or
/// more than one rank.
/// `encode` false (/tokenize): the images are decoded and sized but the tower does not run.
std::vector<int32_t> render_chat_request_images(const ServeContext& ctx, ChatRequest& cr,
                                                std::shared_ptr<const ImagePrompt>* images, bool encode = true);

/// Sets a JSON body.
void send_json(httplib::Response& res, const nlohmann::ordered_json& j, int status = 200);

}  // namespace k3::server

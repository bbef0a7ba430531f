// remote.cpp: the HTTP API reader of `factum inspect --server` (see remote.hpp), over factum's
// synchronous HTTP client. Used by the one thread that runs a subcommand.
#include "remote.hpp"

#include "records.hpp"

namespace factum::tools {

using nlohmann::json;

namespace {

/// What an exchange was doing, for messages: "connect to", "send the request to", ...
std::string_view doing(http::client::stage st) {
  switch (st) {
  case http::client::stage::write: return "send the request to";
  case http::client::stage::read: return "read the response of";
  default: return "connect to";
  }
}

} // namespace

std::string facts_query(const fact_filter& f) {
  std::string q;
  auto add = [&](const char* name, const std::string& value) {
    q += q.empty() ? '?' : '&';
    q += name;
    q += '=';
    q += http::client::percent_encode(value);
  };
  if (!f.type.empty())
    add("type", f.type);
  if (!f.subtype.empty())
    add("subtype", f.subtype);
  if (f.since_ms)
    add("since", std::to_string(*f.since_ms));
  if (f.until_ms)
    add("until", std::to_string(*f.until_ms));
  if (f.after_seq)
    add("after_seq", std::to_string(*f.after_seq));
  if (!f.trace_id.empty())
    add("trace_id", f.trace_id);
  add("limit", std::to_string(f.limit));
  return q;
}

result<http::client::url> parse_server_url(std::string_view url) {
  if (url.rfind("https://", 0) == 0)
    return status{errc::invalid_argument,
                  "https is not supported: factum inspect speaks plain HTTP to a server on this "
                  "machine (http://127.0.0.1:PORT); reach a remote server through an SSH tunnel"};
  auto u = http::client::parse_url(url);
  if (!u)
    return status{errc::invalid_argument, "bad --server URL \"" + std::string(url.substr(0, 200)) +
                                            "\": " + u.error().message()};
  return u;
}

result<remote_api> remote_api::make(std::string_view url, std::string api_key,
                                    std::chrono::milliseconds timeout) {
  auto ep = parse_server_url(url);
  if (!ep)
    return ep.error();
  if (api_key.empty())
    return status{errc::invalid_argument,
                  "--server needs an API key: --api-key KEY or FACTUM_API_KEY"};
  return remote_api(std::move(*ep), std::move(api_key), timeout);
}

std::string remote_api::entity_path(const entity_key& key, const char* what) const {
  return "/v1/entities/" + http::client::percent_encode(key.type) + "/" +
         http::client::percent_encode(key.id) + "/" + what;
}

result<json> remote_api::get_json(const std::string& target, std::string* link) const {
  return exchange("GET", target, nullptr, link);
}

result<json> remote_api::send_json(const char* method, const std::string& target,
                                   const json& body) const {
  auto text = body.dump();
  return exchange(method, target, &text, nullptr);
}

result<json> remote_api::exchange(const char* method, const std::string& target,
                                  const std::string* body_text, std::string* link) const {
  using http::client::failure;
  http::client::sync_options o;
  o.timeout = timeout_; // one deadline for the whole exchange
  o.loopback_only = true;
  http::client::sync_client client(server_.host, server_.port, o);
  http::client::header_list h{{"User-Agent", "factum-inspect"},
                              {"Accept", "application/json"},
                              {"Connection", "close"},
                              {"X-API-Key", api_key_}};
  if (body_text)
    h.emplace_back("Content-Type", "application/json");
  auto res = client.request(method, server_.path + target, h, body_text ? *body_text : "");
  std::string where = "http://" + server_.host + ":" + std::to_string(server_.port);
  switch (res.failed) {
  case failure::none: break;
  case failure::not_loopback:
    return status{errc::invalid_argument,
                  "refusing to send the API key in clear text to " + res.error +
                    ": --server must be a loopback address (127.0.0.1, ::1, localhost)"};
  case failure::resolve:
    return status{errc::unavailable, "cannot resolve " + server_.host + ": " + res.error};
  case failure::timeout:
    return status{errc::unavailable, "timed out after " + std::to_string(timeout_.count()) +
                                       " ms trying to " + std::string(doing(res.failed_at)) + " " +
                                       where};
  default:
    return status{errc::unavailable,
                  "cannot " + std::string(doing(res.failed_at)) + " " + where + ": " + res.error};
  }
  auto body = json::parse(res.body, nullptr, false);
  if (res.status < 200 || res.status > 299) {
    std::string msg = "server answered " + std::to_string(res.status) +
                      (res.reason.empty() ? "" : " " + res.reason) + " for " + method + " " +
                      target;
    if (body.is_object()) { // application/problem+json
      for (auto* k : {"title", "detail"})
        if (body.contains(k) && body[k].is_string())
          msg += ": " + body[k].get<std::string>();
      if (body.contains("code") && body["code"].is_string())
        msg += " [" + body["code"].get<std::string>() + "]";
    }
    return status{res.status == 404 ? errc::not_found : errc::unavailable, msg};
  }
  if (body.is_discarded())
    return status{errc::unavailable,
                  "server sent a body that is not JSON for " + std::string(method) + " " + target};
  if (link)
    *link = res.header("link");
  return body;
}

result<std::vector<fact>> remote_api::facts(const entity_key& key, const fact_filter& f) const {
  // The server stops a page early when its facts are large (a Link header then says where the
  // next one starts): such pages are joined until `f.limit` facts or the end.
  std::vector<fact> out;
  auto page = f;
  for (;;) {
    std::string link;
    auto body = get_json(entity_path(key, "facts") + facts_query(page), &link);
    if (!body)
      return body.error();
    auto list = json_list(*body, "facts");
    if (!list)
      return list.error();
    for (auto& j : *list) {
      auto one = fact_from_json(j);
      if (!one)
        return one.error();
      out.push_back(std::move(*one));
    }
    if (link.empty() || list->empty() || static_cast<int64_t>(out.size()) >= f.limit)
      return out;
    page.after_seq = out.back().seq;
    page.limit = f.limit - static_cast<int64_t>(out.size());
  }
}

result<std::vector<dead_letter_record>> remote_api::dead_letters(const entity_key& key) const {
  auto body = get_json(entity_path(key, "dead-letters"));
  if (!body)
    return body.error();
  auto list = json_list(*body, "dead_letters");
  if (!list)
    return list.error();
  std::vector<dead_letter_record> out;
  for (auto& j : *list) {
    auto one = dead_letter_from_json(j);
    if (!one)
      return one.error();
    out.push_back(std::move(*one));
  }
  return out;
}

result<std::vector<breaker_record>> remote_api::breakers(const entity_key& key) const {
  auto body = get_json(entity_path(key, "breakers"));
  if (!body)
    return body.error();
  auto list = json_list(*body, "breakers");
  if (!list)
    return list.error();
  std::vector<breaker_record> out;
  for (auto& j : *list) {
    auto one = breaker_from_json(j);
    if (!one)
      return one.error();
    out.push_back(std::move(*one));
  }
  return out;
}

} // namespace factum::tools

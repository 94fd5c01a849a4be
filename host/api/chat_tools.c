/* Tools, tool_choice, tool history and reasoning of a chat request; its prompt, grammar and output parsing. */
#include "api/chat_tools.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_prompt.h"
#include "api/context.h"
#include "base/log.h"
#include "base/util.h"
#include "grammar/sy_grammar.h"

void sy_api_chat_init(sy_api_chat *c) {
    memset(c, 0, sizeof *c);
    c->parallel = true;
    c->think = -1;
}

void sy_api_chat_free(sy_api_chat *c) {
    cJSON_Delete(c->messages);
    cJSON_Delete(c->tools);
    cJSON_Delete(c->kwargs);
    memset(c, 0, sizeof *c);
}

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > SY_API_MAX_TOOL_NAME) return false;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-' || s[i] == '.')) return false;
    return true;
}

static const cJSON *obj_get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static bool absent(const cJSON *v) { return v == NULL || cJSON_IsNull(v); }

/* ---- tools ------------------------------------------------------------------------------------------------- */

/* The tool's parameters schema compiled once here, so a schema the grammar cannot honour is a 400 naming it. */
static int check_schema(const cJSON *params, size_t i, sy_api_error *e) {
    char field[96];
    snprintf(field, sizeof field, "tools[%zu].function.parameters", i);
    if (!cJSON_IsObject(params)) return sy_api_fail(e, 400, "invalid_type", field, "%s must be a JSON Schema object", field);
    sy_schema_options o = sy_schema_defaults();
    char *gbnf = NULL;
    char err[512] = "";
    if (sy_json_schema_to_gbnf(params, &o, &gbnf, err, sizeof err) != 0)
        return sy_api_fail(e, 400, "invalid_value", field, "%s: %s", field, err);
    char cerr[512] = "";
    sy_grammar *g = sy_grammar_compile(gbnf, strlen(gbnf), NULL, cerr, sizeof cerr);
    free(gbnf);
    if (g == NULL) return sy_api_fail(e, 400, "invalid_value", field, "%s: %s", field, cerr);
    sy_grammar_free(g);
    return 0;
}

static int check_tools(cJSON *tools, size_t *n, sy_api_error *e) {
    *n = 0;
    if (tools == NULL) return 0;
    if (!cJSON_IsArray(tools)) return sy_api_fail(e, 400, "invalid_type", "tools", "tools must be an array");
    int count = cJSON_GetArraySize(tools);
    if (count > SY_API_MAX_TOOLS)
        return sy_api_fail(e, 400, "invalid_value", "tools", "tools holds %d tools; at most %d are accepted", count,
                           SY_API_MAX_TOOLS);
    size_t i = 0;
    cJSON *t;
    char field[96];
    cJSON_ArrayForEach(t, tools) {
        snprintf(field, sizeof field, "tools[%zu]", i);
        const cJSON *type = obj_get(t, "type");
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsObject(fn))
            return sy_api_fail(e, 400, "invalid_type", field, "%s must be {\"type\": \"function\", \"function\": {...}}",
                               field);
        if (!absent(type) && !(cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0))
            return sy_api_fail(e, 400, "invalid_value", field, "%s.type: only \"function\" tools are supported", field);
        const cJSON *name = obj_get(fn, "name");
        snprintf(field, sizeof field, "tools[%zu].function.name", i);
        if (!cJSON_IsString(name) || !name_ok(name->valuestring))
            return sy_api_fail(e, 400, "invalid_value", field,
                               "%s must be 1 to %d letters, digits, '_', '-' or '.'", field, SY_API_MAX_TOOL_NAME);
        const cJSON *prev;
        size_t j = 0;
        cJSON_ArrayForEach(prev, tools) {
            if (j++ >= i) break;
            if (strcmp(obj_get(obj_get(prev, "function"), "name")->valuestring, name->valuestring) == 0)
                return sy_api_fail(e, 400, "invalid_value", field, "%s: two tools are named '%s'", field,
                                   name->valuestring);
        }
        const cJSON *desc = obj_get(fn, "description");
        if (!absent(desc) && !cJSON_IsString(desc)) {
            snprintf(field, sizeof field, "tools[%zu].function.description", i);
            return sy_api_fail(e, 400, "invalid_type", field, "%s must be a string", field);
        }
        cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (absent(params)) {
            /* No parameters: an object with none, as OpenAI reads it. */
            cJSON_DeleteItemFromObjectCaseSensitive(fn, "parameters");
            cJSON *p = cJSON_AddObjectToObject(fn, "parameters");
            cJSON_AddStringToObject(p, "type", "object");
            cJSON_AddObjectToObject(p, "properties");
        } else if (check_schema(params, i, e) != 0) {
            return -1;
        }
        if (absent(type)) cJSON_AddStringToObject(t, "type", "function");
        i++;
    }
    *n = i;
    return 0;
}

static const cJSON *find_tool(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *n = obj_get(obj_get(t, "function"), "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return t;
    }
    return NULL;
}

/* ---- messages ---------------------------------------------------------------------------------------------- */

/* Assistant tool_calls get their arguments as objects (what templates iterate over) and ids; tool messages
 * must answer a call made before them, and get that call's name. */
static int check_history(cJSON *messages, sy_api_error *e) {
    cJSON *msg;
    size_t i = 0;
    char field[128];
    /* The calls made so far: id -> name, as a JSON object. */
    cJSON *calls = cJSON_CreateObject();
    size_t n_calls = 0;
    int rc = 0;
    cJSON_ArrayForEach(msg, messages) {
        const cJSON *role = obj_get(msg, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        /* Templates concatenate and search contents: a null one (an assistant turn with only calls) is "", and
         * text parts are joined into one string (sy_api_parse_messages refused any other kind). */
        if (cJSON_IsObject(msg) && absent(obj_get(msg, "content"))) {
            cJSON_DeleteItemFromObjectCaseSensitive(msg, "content");
            cJSON_AddStringToObject(msg, "content", "");
        } else if (cJSON_IsObject(msg) && cJSON_IsArray(obj_get(msg, "content"))) {
            sy_buf joined;
            sy_buf_init(&joined);
            const cJSON *part;
            cJSON_ArrayForEach(part, obj_get(msg, "content")) {
                const cJSON *text = obj_get(part, "text");
                if (cJSON_IsString(text)) sy_buf_puts(&joined, text->valuestring);
            }
            cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateString(joined.data ? joined.data : ""));
            sy_buf_free(&joined);
        }
        cJSON *tcs = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        if (!absent(tcs)) {
            snprintf(field, sizeof field, "messages[%zu].tool_calls", i);
            if (strcmp(r, "assistant") != 0) {
                rc = sy_api_fail(e, 400, "invalid_value", field, "%s: only assistant messages make tool calls", field);
                break;
            }
            if (!cJSON_IsArray(tcs)) {
                rc = sy_api_fail(e, 400, "invalid_type", field, "%s must be an array", field);
                break;
            }
            cJSON *tc;
            size_t k = 0;
            cJSON_ArrayForEach(tc, tcs) {
                snprintf(field, sizeof field, "messages[%zu].tool_calls[%zu]", i, k);
                cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
                const cJSON *name = obj_get(fn, "name");
                if (!cJSON_IsObject(tc) || !cJSON_IsObject(fn) || !cJSON_IsString(name) || name->valuestring[0] == '\0') {
                    rc = sy_api_fail(e, 400, "invalid_value", field, "%s must hold function.name", field);
                    goto done;
                }
                cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                if (cJSON_IsString(args)) {
                    cJSON *parsed = args->valuestring[0] ? cJSON_Parse(args->valuestring) : cJSON_CreateObject();
                    if (!cJSON_IsObject(parsed)) {
                        cJSON_Delete(parsed);
                        snprintf(field, sizeof field, "messages[%zu].tool_calls[%zu].function.arguments", i, k);
                        rc = sy_api_fail(e, 400, "invalid_value", field, "%s is not a JSON object", field);
                        goto done;
                    }
                    cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
                } else if (absent(args)) {
                    cJSON_DeleteItemFromObjectCaseSensitive(fn, "arguments");
                    cJSON_AddObjectToObject(fn, "arguments");
                } else if (!cJSON_IsObject(args)) {
                    snprintf(field, sizeof field, "messages[%zu].tool_calls[%zu].function.arguments", i, k);
                    rc = sy_api_fail(e, 400, "invalid_type", field, "%s must be a JSON object or its text", field);
                    goto done;
                }
                const cJSON *id = obj_get(tc, "id");
                char made[48];
                if (!cJSON_IsString(id) || id->valuestring[0] == '\0') {
                    /* Ollama's calls carry no id: one by position, which its tool messages answer in order. */
                    snprintf(made, sizeof made, "call_%zu", n_calls);
                    cJSON_DeleteItemFromObjectCaseSensitive(tc, "id");
                    cJSON_AddStringToObject(tc, "id", made);
                    id = obj_get(tc, "id");
                }
                if (absent(obj_get(tc, "type"))) cJSON_AddStringToObject(tc, "type", "function");
                if (cJSON_GetObjectItemCaseSensitive(calls, id->valuestring) == NULL)
                    cJSON_AddStringToObject(calls, id->valuestring, name->valuestring);
                n_calls++;
                k++;
            }
        }
        if (strcmp(r, "tool") == 0) {
            snprintf(field, sizeof field, "messages[%zu]", i);
            const cJSON *id = obj_get(msg, "tool_call_id");
            if (n_calls == 0) {
                rc = sy_api_fail(e, 400, "invalid_value", field, "%s: a tool message answers no call (no assistant "
                                 "message with tool_calls comes before it)", field);
                break;
            }
            if (absent(id)) {
                /* Ollama: the answer to the call of that name, else to the next call in order. */
                const cJSON *tn = obj_get(msg, "tool_name");
                if (absent(tn)) tn = obj_get(msg, "name");
                const cJSON *c;
                const char *pick = NULL;
                cJSON_ArrayForEach(c, calls) {
                    if (cJSON_IsString(tn) && strcmp(c->valuestring, tn->valuestring) == 0) pick = c->string;
                }
                if (pick == NULL && cJSON_IsString(tn)) {
                    rc = sy_api_fail(e, 400, "invalid_value", field, "%s: a tool message answers no call of '%s'",
                                     field, tn->valuestring);
                    break;
                }
                if (pick == NULL) pick = cJSON_GetArrayItem(calls, cJSON_GetArraySize(calls) - 1)->string;
                cJSON_AddStringToObject(msg, "tool_call_id", pick);
                id = obj_get(msg, "tool_call_id");
            }
            if (!cJSON_IsString(id)) {
                rc = sy_api_fail(e, 400, "invalid_type", field, "%s.tool_call_id must be a string", field);
                break;
            }
            const cJSON *called = cJSON_GetObjectItemCaseSensitive(calls, id->valuestring);
            if (called == NULL) {
                char shown[80];
                sy_utf8_sanitize(shown, sizeof shown, id->valuestring, strlen(id->valuestring));
                rc = sy_api_fail(e, 400, "invalid_value", field, "%s: tool_call_id '%s' answers no call made before it",
                                 field, shown);
                break;
            }
            if (absent(obj_get(msg, "name"))) cJSON_AddStringToObject(msg, "name", called->valuestring);
        }
        i++;
    }
done:
    cJSON_Delete(calls);
    return rc;
}

int sy_api_chat_set(sy_api_chat *c, cJSON *messages, cJSON *tools, sy_api_error *e) {
    cJSON_Delete(c->messages);
    cJSON_Delete(c->tools);
    c->messages = messages;
    c->tools = tools;
    if (check_tools(c->tools, &c->n_tools, e) != 0) return -1;
    if (c->n_tools == 0) {
        cJSON_Delete(c->tools);
        c->tools = NULL;
    }
    if (c->choice == SY_TOOL_CHOICE_NAMED && (c->tools == NULL || find_tool(c->tools, c->named) == NULL))
        return sy_api_fail(e, 400, "invalid_value", "tool_choice", "tool_choice names '%s', which is not among the tools",
                           c->named);
    if (c->choice == SY_TOOL_CHOICE_REQUIRED && c->tools == NULL)
        return sy_api_fail(e, 400, "invalid_value", "tool_choice", "tool_choice is required, but no tools are given");
    if (c->messages != NULL && check_history(c->messages, e) != 0) return -1;
    return 0;
}

static int kwargs_object(sy_api_chat *c) {
    if (c->kwargs == NULL) c->kwargs = cJSON_CreateObject();
    return 0;
}

static int parse_choice(const cJSON *v, sy_api_chat *c, sy_api_error *e) {
    if (absent(v)) return 0;
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (strcmp(s, "auto") == 0) c->choice = SY_TOOL_CHOICE_AUTO;
        else if (strcmp(s, "none") == 0) c->choice = SY_TOOL_CHOICE_NONE;
        else if (strcmp(s, "required") == 0) c->choice = SY_TOOL_CHOICE_REQUIRED;
        else
            return sy_api_fail(e, 400, "invalid_value", "tool_choice",
                               "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
        return 0;
    }
    const cJSON *name = obj_get(obj_get(v, "function"), "name");
    if (!cJSON_IsObject(v) || !cJSON_IsString(name))
        return sy_api_fail(e, 400, "invalid_value", "tool_choice",
                           "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                           "\"function\": {\"name\": ...}}");
    if (strlen(name->valuestring) > SY_API_MAX_TOOL_NAME)
        return sy_api_fail(e, 400, "invalid_value", "tool_choice.function.name", "tool_choice names no tool");
    c->choice = SY_TOOL_CHOICE_NAMED;
    snprintf(c->named, sizeof c->named, "%s", name->valuestring);
    return 0;
}

static int parse_kwargs(const cJSON *body, sy_api_chat *c, sy_api_error *e) {
    const cJSON *kw = obj_get(body, "chat_template_kwargs");
    if (!absent(kw)) {
        if (!cJSON_IsObject(kw))
            return sy_api_fail(e, 400, "invalid_type", "chat_template_kwargs", "chat_template_kwargs must be an object");
        c->kwargs = cJSON_Duplicate(kw, true);
        const cJSON *et = obj_get(kw, "enable_thinking");
        if (cJSON_IsBool(et)) c->think = cJSON_IsTrue(et) ? 1 : 0;
    }
    return 0;
}

static int parse_effort(const cJSON *v, const char *field, sy_api_chat *c, sy_api_error *e) {
    if (absent(v)) return 0;
    static const char *const levels[] = {"minimal", "low", "medium", "high"};
    if (cJSON_IsString(v))
        for (size_t i = 0; i < 4; i++)
            if (strcmp(v->valuestring, levels[i]) == 0) {
                kwargs_object(c);
                cJSON_DeleteItemFromObjectCaseSensitive(c->kwargs, "reasoning_effort");
                cJSON_AddStringToObject(c->kwargs, "reasoning_effort", levels[i]);
                return 0;
            }
    return sy_api_fail(e, 400, "invalid_value", field, "%s must be \"minimal\", \"low\", \"medium\" or \"high\"", field);
}

int sy_api_chat_from_openai(const cJSON *body, sy_api_chat *c, sy_api_error *e) {
    if (parse_choice(obj_get(body, "tool_choice"), c, e) != 0) return -1;
    const cJSON *ptc = obj_get(body, "parallel_tool_calls");
    if (!absent(ptc)) {
        if (!cJSON_IsBool(ptc))
            return sy_api_fail(e, 400, "invalid_type", "parallel_tool_calls", "parallel_tool_calls must be a boolean");
        c->parallel = cJSON_IsTrue(ptc);
    }
    const cJSON *rf = obj_get(body, "reasoning_format");
    if (!absent(rf)) {
        if (!cJSON_IsString(rf))
            return sy_api_fail(e, 400, "invalid_type", "reasoning_format", "reasoning_format must be a string");
        if (strcmp(rf->valuestring, "none") == 0) c->reasoning_format = SY_REASONING_NONE;
        else if (strcmp(rf->valuestring, "auto") == 0 || strcmp(rf->valuestring, "deepseek") == 0 ||
                 strcmp(rf->valuestring, "deepseek-legacy") == 0)
            c->reasoning_format = SY_REASONING_AUTO;
        else
            return sy_api_fail(e, 400, "invalid_value", "reasoning_format",
                               "reasoning_format must be \"none\", \"auto\", \"deepseek\" or \"deepseek-legacy\"");
    }
    if (parse_kwargs(body, c, e) != 0) return -1;
    if (parse_effort(obj_get(body, "reasoning_effort"), "reasoning_effort", c, e) != 0) return -1;
    const cJSON *fns = obj_get(body, "functions");
    if (cJSON_IsArray(fns) && cJSON_GetArraySize(fns) > 0)
        return sy_api_fail(e, 400, "unsupported_parameter", "functions",
                           "functions (the deprecated form) is not supported; give tools");
    const cJSON *tools = obj_get(body, "tools");
    const cJSON *msgs = obj_get(body, "messages");
    return sy_api_chat_set(c, cJSON_IsArray(msgs) ? cJSON_Duplicate(msgs, true) : NULL,
                           absent(tools) ? NULL : cJSON_Duplicate(tools, true), e);
}

int sy_api_chat_from_ollama(const cJSON *body, sy_api_chat *c, sy_api_error *e) {
    const cJSON *think = obj_get(body, "think");
    if (!absent(think)) {
        if (cJSON_IsBool(think)) {
            c->think = cJSON_IsTrue(think) ? 1 : 0;
        } else if (cJSON_IsString(think)) {
            if (parse_effort(think, "think", c, e) != 0)
                return sy_api_fail(e, 400, "invalid_value", "think", "think must be true, false, \"low\", \"medium\" or "
                                   "\"high\"");
            c->think = 1;
        } else {
            return sy_api_fail(e, 400, "invalid_type", "think", "think must be true, false, \"low\", \"medium\" or "
                               "\"high\"");
        }
        if (c->think == 0) c->reasoning_format = SY_REASONING_NONE;
    }
    const cJSON *tools = obj_get(body, "tools");
    const cJSON *msgs = obj_get(body, "messages");
    cJSON *copy = cJSON_IsArray(msgs) ? cJSON_Duplicate(msgs, true) : NULL;
    /* Ollama's past thinking is the templates' reasoning_content. */
    cJSON *msg;
    cJSON_ArrayForEach(msg, copy) {
        const cJSON *th = obj_get(msg, "thinking");
        if (cJSON_IsString(th) && absent(obj_get(msg, "reasoning_content")))
            cJSON_AddStringToObject(msg, "reasoning_content", th->valuestring);
    }
    return sy_api_chat_set(c, copy, absent(tools) ? NULL : cJSON_Duplicate(tools, true), e);
}

/* ---- the prompt ---------------------------------------------------------------------------------------------- */

static char *print(const cJSON *v) {
    char *s = cJSON_PrintUnformatted(v);
    return s ? s : sy_strdup("null");
}

/* The generic format's instructions: the tools, and the one JSON object to answer with. */
static void generic_system_prompt(const sy_api_chat *c, sy_buf *b) {
    sy_buf_puts(b, "You can call these tools:\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, c->tools) {
        const cJSON *fn = obj_get(t, "function");
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "name", cJSON_Duplicate(obj_get(fn, "name"), true));
        if (cJSON_IsString(obj_get(fn, "description")))
            cJSON_AddItemToObject(d, "description", cJSON_Duplicate(obj_get(fn, "description"), true));
        cJSON_AddItemToObject(d, "parameters", cJSON_Duplicate(obj_get(fn, "parameters"), true));
        char *s = print(d);
        cJSON_Delete(d);
        sy_buf_puts(b, s);
        sy_buf_puts(b, "\n");
        cJSON_free(s);
    }
    bool must = c->choice == SY_TOOL_CHOICE_REQUIRED || c->choice == SY_TOOL_CHOICE_NAMED;
    sy_buf_puts(b, "\nReply with one JSON object");
    sy_buf_puts(b, must ? ": " : ", either ");
    sy_buf_puts(b, "{\"tool_calls\": [{\"name\": \"TOOL\", \"arguments\": {...}}]} to call ");
    sy_buf_puts(b, c->parallel ? "tools" : "one tool");
    if (!must) sy_buf_puts(b, ", or {\"response\": \"...\"} with your answer to the user");
    sy_buf_puts(b, ".");
}

/* An assistant's past calls as the generic format writes them. */
static void generic_calls_text(const cJSON *tcs, sy_buf *b) {
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
    const cJSON *tc;
    cJSON_ArrayForEach(tc, tcs) {
        const cJSON *fn = obj_get(tc, "function");
        cJSON *call = cJSON_CreateObject();
        cJSON_AddItemToObject(call, "name", cJSON_Duplicate(obj_get(fn, "name"), true));
        cJSON_AddItemToObject(call, "arguments", cJSON_Duplicate(obj_get(fn, "arguments"), true));
        cJSON_AddItemToArray(arr, call);
    }
    char *s = print(o);
    cJSON_Delete(o);
    sy_buf_puts(b, s);
    cJSON_free(s);
}

static const char *content_text(const cJSON *msg, sy_buf *tmp) {
    const cJSON *content = obj_get(msg, "content");
    if (cJSON_IsString(content)) return content->valuestring;
    if (cJSON_IsArray(content)) {
        const cJSON *part;
        cJSON_ArrayForEach(part, content) {
            const cJSON *text = obj_get(part, "text");
            if (cJSON_IsString(text)) sy_buf_puts(tmp, text->valuestring);
        }
        return tmp->data ? tmp->data : "";
    }
    return "";
}

/* Rendering through the built-in formats (chat/chat_template.h): tools and tool history become text in the
 * generic format. */
static int render_builtin(sy_http_request *r, const sy_api_model *m, sy_api_chat *c, char **text, size_t *len,
                          sy_api_error *e) {
    size_t n = (size_t)cJSON_GetArraySize(c->messages);
    sy_chat_message *items = sy_xcalloc(n + 1, sizeof *items);
    sy_buf *texts = sy_xcalloc(n + 1, sizeof *texts);
    size_t k = 0;
    bool describe = c->tools_active && c->traits.tool_format == SY_TOOL_FORMAT_GENERIC;
    const cJSON *msg;
    size_t i = 0;
    cJSON_ArrayForEach(msg, c->messages) {
        const char *role = obj_get(msg, "role")->valuestring;
        sy_buf tmp;
        sy_buf_init(&tmp);
        const char *content = content_text(msg, &tmp);
        sy_buf *b = &texts[k];
        sy_buf_init(b);
        if (strcmp(role, "developer") == 0) role = "system";
        if (describe && i == 0 && strcmp(role, "system") == 0) {
            sy_buf_puts(b, content);
            sy_buf_puts(b, "\n\n");
            generic_system_prompt(c, b);
        } else if (strcmp(role, "tool") == 0) {
            cJSON *o = cJSON_CreateObject();
            cJSON *resp = cJSON_AddObjectToObject(o, "tool_response");
            cJSON_AddItemToObject(resp, "name", cJSON_Duplicate(obj_get(msg, "name"), true));
            cJSON_AddStringToObject(resp, "content", content);
            char *s = print(o);
            cJSON_Delete(o);
            sy_buf_puts(b, s);
            cJSON_free(s);
        } else {
            sy_buf_puts(b, content);
            const cJSON *tcs = obj_get(msg, "tool_calls");
            if (cJSON_IsArray(tcs) && cJSON_GetArraySize(tcs) > 0) {
                if (b->len > 0) sy_buf_puts(b, "\n");
                generic_calls_text(tcs, b);
            }
        }
        sy_buf_free(&tmp);
        if (describe && i == 0 && strcmp(role, "system") != 0) {
            /* No system message: one with the tools goes first. */
            sy_buf *s = b;
            sy_buf moved = *s;
            sy_buf_init(s);
            generic_system_prompt(c, s);
            items[k].role = "system";
            items[k].content = s->data;
            items[k].content_len = s->len;
            k++;
            texts[k] = moved;
            b = &texts[k];
        }
        items[k].role = role;
        items[k].content = b->data ? b->data : "";
        items[k].content_len = b->len;
        k++;
        i++;
    }
    int rc = sy_api_render_chat(r, m, items, k, true, text, len, e);
    for (size_t j = 0; j <= n; j++) sy_buf_free(&texts[j]);
    free(texts);
    free(items);
    return rc;
}

/* ---- Jinja ---------------------------------------------------------------------------------------------------- */

#define SY_API_MAX_TEMPLATE_BYTES ((size_t)1 << 20)

/* Messages for a template that renders no tools: the generic format's instructions in the system message, past
 * calls as the JSON the model was asked for, tool results as user turns (merged when several follow a call). */
static cJSON *generic_messages(const sy_api_chat *c, bool describe) {
    cJSON *out = cJSON_CreateArray();
    const cJSON *msg;
    bool first = true;
    cJSON *last_results = NULL;
    cJSON_ArrayForEach(msg, c->messages) {
        const char *role = cJSON_GetObjectItemCaseSensitive(msg, "role")->valuestring;
        sy_buf tmp, b;
        sy_buf_init(&tmp);
        sy_buf_init(&b);
        const char *content = content_text(msg, &tmp);
        if (first && describe) {
            sy_buf sys;
            sy_buf_init(&sys);
            if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) {
                sy_buf_puts(&sys, content);
                sy_buf_puts(&sys, "\n\n");
            }
            generic_system_prompt(c, &sys);
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "system");
            cJSON_AddStringToObject(m, "content", sys.data);
            cJSON_AddItemToArray(out, m);
            sy_buf_free(&sys);
            first = false;
            if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) {
                sy_buf_free(&tmp);
                continue;
            }
        }
        first = false;
        if (strcmp(role, "tool") == 0) {
            cJSON *o = cJSON_CreateObject();
            cJSON *resp = cJSON_AddObjectToObject(o, "tool_response");
            cJSON_AddItemToObject(resp, "name", cJSON_Duplicate(obj_get(msg, "name"), true));
            cJSON_AddStringToObject(resp, "content", content);
            char *s = print(o);
            cJSON_Delete(o);
            if (last_results != NULL) {
                /* Several results in a row: one user turn. */
                cJSON *prev = cJSON_GetObjectItemCaseSensitive(last_results, "content");
                sy_buf_puts(&b, prev->valuestring);
                sy_buf_puts(&b, "\n");
                sy_buf_puts(&b, s);
                cJSON_ReplaceItemInObjectCaseSensitive(last_results, "content", cJSON_CreateString(b.data));
            } else {
                last_results = cJSON_CreateObject();
                cJSON_AddStringToObject(last_results, "role", "user");
                cJSON_AddStringToObject(last_results, "content", s);
                cJSON_AddItemToArray(out, last_results);
            }
            cJSON_free(s);
        } else {
            last_results = NULL;
            sy_buf_puts(&b, content);
            const cJSON *tcs = obj_get(msg, "tool_calls");
            if (cJSON_IsArray(tcs) && cJSON_GetArraySize(tcs) > 0) {
                if (b.len > 0) sy_buf_puts(&b, "\n");
                generic_calls_text(tcs, &b);
            }
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", role);
            cJSON_AddStringToObject(m, "content", b.data ? b.data : "");
            const cJSON *rc = obj_get(msg, "reasoning_content");
            if (cJSON_IsString(rc)) cJSON_AddStringToObject(m, "reasoning_content", rc->valuestring);
            cJSON_AddItemToArray(out, m);
        }
        sy_buf_free(&tmp);
        sy_buf_free(&b);
    }
    return out;
}

/* Renders through the model's Jinja template (api/chat_prompt.c chooses and caches it): the messages as they are
 * and the tools where the template renders tools, the generic format's messages otherwise. */
static int render_template(sy_http_request *r, const sy_api_model *m, sy_api_chat *c, char **text, size_t *len,
                           sy_api_error *e) {
    bool native = c->traits.supports_tools;
    cJSON *msgs = native ? cJSON_Duplicate(c->messages, true) : generic_messages(c, c->tools_active);
    size_t n = (size_t)cJSON_GetArraySize(msgs);
    sy_chat_message *items = sy_xcalloc(n + 1, sizeof *items);
    size_t i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, msgs) {
        const char *role = obj_get(msg, "role")->valuestring;
        const cJSON *content = obj_get(msg, "content");
        items[i].role = strcmp(role, "developer") == 0 ? "system" : role;
        items[i].content = cJSON_IsString(content) ? content->valuestring : "";
        items[i].content_len = strlen(items[i].content);
        i++;
    }
    cJSON *kw = c->kwargs ? cJSON_Duplicate(c->kwargs, true) : cJSON_CreateObject();
    if (c->think >= 0 && cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking") == NULL)
        cJSON_AddBoolToObject(kw, "enable_thinking", c->think == 1);
    sy_api_chat_request q = {.items = items,
                             .n_items = n,
                             .messages = msgs,
                             .tools = native && c->tools_active ? c->tools : NULL,
                             .chat_template_kwargs = kw,
                             .add_generation_prompt = true};
    int rc = sy_api_render_chat_request(r, m, &q, text, len, e);
    free(items);
    cJSON_Delete(msgs);
    cJSON_Delete(kw);
    return rc;
}

/* ---- grammars ------------------------------------------------------------------------------------------------ */

static void gbnf_literal(sy_buf *g, const char *s) {
    sy_buf_puts(g, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"') sy_buf_puts(g, "\\\"");
        else if (ch == '\\') sy_buf_puts(g, "\\\\");
        else if (ch == '\n') sy_buf_puts(g, "\\n");
        else if (ch == '\r') sy_buf_puts(g, "\\r");
        else if (ch == '\t') sy_buf_puts(g, "\\t");
        else if (ch < 0x20) sy_buf_printf(g, "\\x%02x", ch);
        else sy_buf_append(g, s, 1);
    }
    sy_buf_puts(g, "\"");
}

/* The rules of a schema's grammar with every rule name prefixed, so several schemas live in one grammar.
 * Names are the identifiers outside literals, classes, token references, repetition counts and comments. */
static void gbnf_prefixed(sy_buf *g, const char *src, const char *prefix) {
    const char *p = src;
    while (*p) {
        char ch = *p;
        if (ch == '"' || ch == '[' || ch == '<' || ch == '{') {
            char close = ch == '"' ? '"' : ch == '[' ? ']' : ch == '<' ? '>' : '}';
            const char *s = p++;
            while (*p && *p != close) {
                if (*p == '\\' && p[1]) p++;
                p++;
            }
            if (*p) p++;
            sy_buf_append(g, s, (size_t)(p - s));
        } else if (ch == '#') {
            while (*p && *p != '\n') p++;
        } else if (isalnum((unsigned char)ch) || ch == '-') {
            const char *s = p;
            while (isalnum((unsigned char)*p) || *p == '-') p++;
            sy_buf_puts(g, prefix);
            sy_buf_append(g, s, (size_t)(p - s));
        } else {
            sy_buf_append(g, p, 1);
            p++;
        }
    }
    sy_buf_puts(g, "\n");
}

typedef struct grammar_ctx {
    const sy_api_model *m;
    sy_api_chat *c;
    sy_buf g;
    sy_gen_params *p;
} grammar_ctx;

/* A marker of the format: a token reference when it is one control token of the model (the grammar never
 * spells control tokens from text), else its text. */
static int32_t marker_token(const sy_api_model *m, const char *text) {
    char err[128];
    size_t n = 0;
    int32_t *ids = sy_loaded_model_tokenize(m->lm, text, strlen(text), SY_TOKENIZE_PARSE_SPECIAL, &n, err, sizeof err);
    int32_t id = -1;
    if (ids != NULL && n == 1 && (m->lm->engine->token_flags(m->lm->model, ids[0]) & SY_TOKEN_CONTROL)) id = ids[0];
    free(ids);
    return id;
}

static void marker(grammar_ctx *x, const char *text) {
    int32_t id = marker_token(x->m, text);
    if (id >= 0) sy_buf_printf(&x->g, " <[%d]> ", id);
    else {
        sy_buf_puts(&x->g, " ");
        gbnf_literal(&x->g, text);
        sy_buf_puts(&x->g, " ");
    }
}

static void add_trigger(grammar_ctx *x, const char *text) {
    sy_gen_constraint *k = &x->p->constraint;
    int32_t id = marker_token(x->m, text);
    if (id >= 0) {
        if (k->n_trigger_tokens < SY_GEN_MAX_TRIGGERS) k->trigger_tokens[k->n_trigger_tokens++] = id;
    } else if (k->n_trigger_words < SY_GEN_MAX_TRIGGERS) {
        k->trigger_words[k->n_trigger_words++] = text;
    }
}

/* The JSON call object of tool i in the key names of the format. */
static void json_call(grammar_ctx *x, size_t i, const char *name, const char *args_key, bool with_id) {
    sy_buf_printf(&x->g, "call-%zu ::= \"{\\\"name\\\": \\\"\" ", i);
    char lit[SY_API_MAX_TOOL_NAME + 4];
    snprintf(lit, sizeof lit, "%s", name);
    gbnf_literal(&x->g, lit);
    sy_buf_printf(&x->g, " \"\\\", \\\"%s\\\": \" t%zu-root", args_key, i);
    if (with_id) sy_buf_puts(&x->g, " \", \\\"id\\\": \\\"\" [a-zA-Z0-9]{9} \"\\\"\"");
    sy_buf_puts(&x->g, " \"}\"\n");
}

/* The calls a request allows: every tool, or the named one. */
static bool tool_allowed(const sy_api_chat *c, const char *name) {
    return c->choice != SY_TOOL_CHOICE_NAMED || strcmp(c->named, name) == 0;
}

/* call ::= call-0 | call-1 ...  for the allowed tools; calls ::= call (SEP call)* or call. */
static void call_alternatives(grammar_ctx *x, const char *sep) {
    sy_buf_puts(&x->g, "call ::=");
    size_t i = 0, k = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, x->c->tools) {
        if (tool_allowed(x->c, obj_get(obj_get(t, "function"), "name")->valuestring))
            sy_buf_printf(&x->g, "%s call-%zu", k++ ? " |" : "", i);
        i++;
    }
    sy_buf_puts(&x->g, "\n");
    if (x->c->parallel) {
        sy_buf_puts(&x->g, "calls ::= call (");
        gbnf_literal(&x->g, sep);
        sy_buf_puts(&x->g, " call)*\n");
    } else {
        sy_buf_puts(&x->g, "calls ::= call\n");
    }
}

/* Thinking before the calls: optional where the template thinks, its rest where the prompt opened it. */
static void reasoning_prefix(grammar_ctx *x) {
    const char *open = x->c->traits.think_open, *close = x->c->traits.think_close;
    sy_buf_puts(&x->g, "think-text ::= ([^<] | \"<\" [^/])*\n");
    if (x->c->parse.reasoning_open) {
        sy_buf_puts(&x->g, "prefix ::= think-text ");
        gbnf_literal(&x->g, close);
        sy_buf_puts(&x->g, " [ \\n]{0,4}\n");
    } else if (x->c->traits.thinking && x->c->think != 0 && x->c->parse.split_reasoning) {
        sy_buf_puts(&x->g, "prefix ::= (");
        gbnf_literal(&x->g, open);
        sy_buf_puts(&x->g, " think-text ");
        gbnf_literal(&x->g, close);
        sy_buf_puts(&x->g, " [ \\n]{0,4})?\n");
    } else {
        sy_buf_puts(&x->g, "prefix ::= \"\"\n");
    }
}

/* Formats whose parameters are written one by one (XML tags, Python keywords): each parameter's value grammar,
 * a text run for strings and the property's JSON Schema grammar otherwise, under the prefix t<i>p<j>-. */
static bool param_formats(sy_tool_format f) {
    return f == SY_TOOL_FORMAT_QWEN3_CODER || f == SY_TOOL_FORMAT_GLM4 || f == SY_TOOL_FORMAT_MINIMAX_M2 ||
           f == SY_TOOL_FORMAT_LFM2;
}

static bool in_required(const cJSON *required, const char *key) {
    const cJSON *r;
    cJSON_ArrayForEach(r, required) if (cJSON_IsString(r) && strcmp(r->valuestring, key) == 0) return true;
    return false;
}

static int param_call(grammar_ctx *x, size_t i, const cJSON *fn, sy_api_error *e) {
    sy_buf *g = &x->g;
    sy_tool_format f = x->c->parse.format;
    const char *name = obj_get(fn, "name")->valuestring;
    const cJSON *params = obj_get(fn, "parameters");
    const cJSON *props = obj_get(params, "properties");
    const cJSON *required = obj_get(params, "required");
    sy_buf seq;
    sy_buf_init(&seq);
    size_t j = 0;
    const cJSON *p;
    sy_schema_options so = sy_schema_defaults();
    cJSON_ArrayForEach(p, props) {
        const char *key = p->string;
        bool req = in_required(required, key);
        const cJSON *type = obj_get(p, "type");
        /* Strings between tags are raw text: an enum as its words, lengths as a bounded run; a pattern or a
         * format is a JSON string (the parser reads a quoted value of a string parameter as JSON). */
        bool raw = f != SY_TOOL_FORMAT_LFM2 && cJSON_IsString(type) && strcmp(type->valuestring, "string") == 0 &&
                   obj_get(p, "const") == NULL && obj_get(p, "pattern") == NULL && obj_get(p, "format") == NULL;
        const cJSON *en = obj_get(p, "enum");
        const cJSON *mn = obj_get(p, "minLength"), *mx = obj_get(p, "maxLength");
        bool enum_ok = cJSON_IsArray(en) && cJSON_GetArraySize(en) > 0;
        const cJSON *ev;
        cJSON_ArrayForEach(ev, en) if (!cJSON_IsString(ev)) enum_ok = false;
        if (raw && en != NULL && !enum_ok) raw = false;
        if (raw && enum_ok) {
            sy_buf_printf(g, "t%zup%zu-root ::=", i, j);
            size_t k = 0;
            cJSON_ArrayForEach(ev, en) {
                sy_buf_puts(g, k++ ? " | " : " ");
                gbnf_literal(g, ev->valuestring);
            }
            sy_buf_puts(g, "\n");
        } else if (raw && (cJSON_IsNumber(mn) || cJSON_IsNumber(mx))) {
            double lo = cJSON_IsNumber(mn) ? mn->valuedouble : 0, hi = cJSON_IsNumber(mx) ? mx->valuedouble : -1;
            if (lo < 0 || lo > SY_GRAMMAR_MAX_REPEAT || hi > SY_GRAMMAR_MAX_REPEAT || (hi >= 0 && hi < lo)) {
                sy_buf_free(&seq);
                return sy_api_fail(e, 400, "invalid_value", "tools", "tools[%zu].function.parameters.properties.%s: "
                                   "minLength/maxLength out of range", i, key);
            }
            if (hi >= 0) sy_buf_printf(g, "t%zup%zu-root ::= [^<]{%.0f,%.0f}\n", i, j, lo, hi);
            else sy_buf_printf(g, "t%zup%zu-root ::= [^<]{%.0f,}\n", i, j, lo);
        } else if (raw) {
            sy_buf_printf(g, "t%zup%zu-root ::= xml-text\n", i, j);
        } else {
            char *gbnf = NULL;
            char err[512] = "";
            if (sy_json_schema_to_gbnf(p, &so, &gbnf, err, sizeof err) != 0) {
                sy_buf_free(&seq);
                return sy_api_fail(e, 400, "invalid_value", "tools", "tools[%zu].function.parameters.properties.%s: %s",
                                   i, key, err);
            }
            char prefix[48];
            snprintf(prefix, sizeof prefix, "t%zup%zu-", i, j);
            gbnf_prefixed(g, gbnf, prefix);
            free(gbnf);
        }
        /* One parameter as the format writes it. */
        sy_buf_printf(g, "param-%zu-%zu ::= ", i, j);
        sy_buf lit;
        sy_buf_init(&lit);
        if (f == SY_TOOL_FORMAT_QWEN3_CODER) sy_buf_printf(&lit, "<parameter=%s>\n", key);
        else if (f == SY_TOOL_FORMAT_GLM4) sy_buf_printf(&lit, "<arg_key>%s</arg_key>\n<arg_value>", key);
        else if (f == SY_TOOL_FORMAT_MINIMAX_M2) sy_buf_printf(&lit, "<parameter name=\"%s\">", key);
        else sy_buf_printf(&lit, "%s=", key);
        gbnf_literal(g, lit.data);
        sy_buf_printf(g, " t%zup%zu-root ", i, j);
        sy_buf_clear(&lit);
        if (f == SY_TOOL_FORMAT_QWEN3_CODER) sy_buf_puts(&lit, "\n</parameter>\n");
        else if (f == SY_TOOL_FORMAT_GLM4) sy_buf_puts(&lit, "</arg_value>\n");
        else if (f == SY_TOOL_FORMAT_MINIMAX_M2) sy_buf_puts(&lit, "</parameter>\n");
        if (lit.len > 0) gbnf_literal(g, lit.data);
        sy_buf_puts(g, "\n");
        sy_buf_free(&lit);
        /* Pythonic calls take the required keywords only (an optional one would need a comma before it). */
        if (f == SY_TOOL_FORMAT_LFM2) {
            if (req) sy_buf_printf(&seq, "%s param-%zu-%zu", seq.len ? " \", \"" : "", i, j);
        } else {
            sy_buf_printf(&seq, " param-%zu-%zu%s", i, j, req ? "" : "?");
        }
        j++;
    }
    const char *body = seq.len ? seq.data : " \"\"";
    sy_buf lit;
    sy_buf_init(&lit);
    sy_buf_printf(g, "call-%zu ::= ", i);
    if (f == SY_TOOL_FORMAT_QWEN3_CODER) {
        sy_buf_printf(&lit, "<tool_call>\n<function=%s>\n", name);
        gbnf_literal(g, lit.data);
        sy_buf_printf(g, "%s \"</function>\\n</tool_call>\"\n", body);
    } else if (f == SY_TOOL_FORMAT_GLM4) {
        sy_buf_printf(&lit, "<tool_call>%s\n", name);
        gbnf_literal(g, lit.data);
        sy_buf_printf(g, "%s \"</tool_call>\"\n", body);
    } else if (f == SY_TOOL_FORMAT_MINIMAX_M2) {
        sy_buf_printf(&lit, "<invoke name=\"%s\">\n", name);
        gbnf_literal(g, lit.data);
        sy_buf_printf(g, "%s \"</invoke>\\n\"\n", body);
    } else {
        sy_buf_printf(&lit, "%s(", name);
        gbnf_literal(g, lit.data);
        sy_buf_printf(g, "%s \")\"\n", seq.len ? seq.data : "");
    }
    sy_buf_free(&lit);
    sy_buf_free(&seq);
    return 0;
}

static int param_grammar(grammar_ctx *x, bool lazy, sy_api_error *e) {
    sy_buf *g = &x->g;
    sy_tool_format f = x->c->parse.format;
    sy_buf_puts(g, "xml-text ::= ([^<] | \"<\" [^/])*\n");
    size_t i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, x->c->tools) {
        if (param_call(x, i, obj_get(t, "function"), e) != 0) return -1;
        i++;
    }
    const char *trigger;
    if (f == SY_TOOL_FORMAT_QWEN3_CODER || f == SY_TOOL_FORMAT_GLM4) {
        call_alternatives(x, "\n");
        sy_buf_puts(g, "body ::= calls\n");
        trigger = "<tool_call>";
    } else if (f == SY_TOOL_FORMAT_MINIMAX_M2) {
        call_alternatives(x, "");
        sy_buf_puts(g, "body ::= \"<minimax:tool_call>\\n\" calls \"</minimax:tool_call>\"\n");
        trigger = "<minimax:tool_call>";
    } else {
        call_alternatives(x, ", ");
        sy_buf_puts(g, "body ::=");
        marker(x, "<|tool_call_start|>");
        sy_buf_puts(g, "\"[\" calls \"]\"");
        marker(x, "<|tool_call_end|>");
        sy_buf_puts(g, "\n");
        trigger = "<|tool_call_start|>";
    }
    if (lazy) {
        add_trigger(x, trigger);
        sy_buf_puts(g, "root ::= body\n");
    } else {
        reasoning_prefix(x);
        sy_buf_puts(g, "root ::= prefix body\n");
    }
    return 0;
}

/* The grammar of the format's calls (root), or -1 when this format's calls are not constrained. */
static int format_grammar(grammar_ctx *x, bool lazy) {
    sy_buf *g = &x->g;
    sy_api_chat *c = x->c;
    sy_tool_format f = c->parse.format;
    size_t i = 0;
    const cJSON *t;
    const char *args_key = f == SY_TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
    bool needs_call_rules = f == SY_TOOL_FORMAT_GENERIC || f == SY_TOOL_FORMAT_HERMES || f == SY_TOOL_FORMAT_LLAMA3 ||
                            f == SY_TOOL_FORMAT_GRANITE || f == SY_TOOL_FORMAT_PHI4 || f == SY_TOOL_FORMAT_MINIMAX_M1 ||
                            (f == SY_TOOL_FORMAT_MISTRAL && !c->traits.mistral_args);
    cJSON_ArrayForEach(t, c->tools) {
        const char *name = obj_get(obj_get(t, "function"), "name")->valuestring;
        if (needs_call_rules)
            json_call(x, i, name, args_key, f == SY_TOOL_FORMAT_MISTRAL);
        else if (f == SY_TOOL_FORMAT_COMMAND_R) {
            sy_buf_printf(g, "call-%zu ::= \"{\\\"tool_call_id\\\": \\\"\" [0-9]{1,3} \"\\\", \\\"tool_name\\\": \\\"%s\\\", "
                             "\\\"parameters\\\": \" t%zu-root \"}\"\n", i, name, i);
        } else if (f == SY_TOOL_FORMAT_FUNCTIONARY_3_1) {
            sy_buf_printf(g, "call-%zu ::= \"<function=%s>\" t%zu-root \"</function>\"\n", i, name, i);
        } else if (f == SY_TOOL_FORMAT_MISTRAL) {
            sy_buf_printf(g, "call-%zu ::=", i);
            marker(x, "[TOOL_CALLS]");
            gbnf_literal(g, name);
            marker(x, "[ARGS]");
            sy_buf_printf(g, "t%zu-root\n", i);
        } else if (f == SY_TOOL_FORMAT_DEEPSEEK) {
            sy_buf_printf(g, "call-%zu ::=", i);
            marker(x, "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>");
            if (c->traits.deepseek_r1) {
                gbnf_literal(g, "function");
                marker(x, "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>");
                gbnf_literal(g, name);
                sy_buf_printf(g, " \"\\n```json\\n\" t%zu-root \"\\n```\"", i);
            } else {
                gbnf_literal(g, name);
                marker(x, "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>");
                sy_buf_printf(g, " t%zu-root", i);
            }
            marker(x, "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>");
            sy_buf_puts(g, "\n");
        } else if (f == SY_TOOL_FORMAT_KIMI_K2) {
            sy_buf_printf(g, "call-%zu ::=", i);
            marker(x, "<|tool_call_begin|>");
            sy_buf_printf(g, " \"functions.%s:\" [0-9]{1,3}", name);
            marker(x, "<|tool_call_argument_begin|>");
            sy_buf_printf(g, " t%zu-root", i);
            marker(x, "<|tool_call_end|>");
            sy_buf_puts(g, "\n");
        } else if (f == SY_TOOL_FORMAT_GPT_OSS) {
            sy_buf_printf(g, "call-%zu ::= \"to=functions.%s\" \" \"? (", i, name);
            marker(x, "<|constrain|>");
            sy_buf_puts(g, "\"json\")?");
            marker(x, "<|message|>");
            sy_buf_printf(g, " t%zu-root\n", i);
        } else if (f == SY_TOOL_FORMAT_FUNCTIONARY_3_2) {
            sy_buf_printf(g, "call-%zu ::= \"%s\\n\" t%zu-root\n", i, name, i);
        } else {
            return -1; /* XML and pythonic formats: parsed, not constrained */
        }
        i++;
    }
    switch (f) {
    case SY_TOOL_FORMAT_GENERIC:
        call_alternatives(x, ", ");
        sy_buf_puts(g, "calls-object ::= \"{\\\"tool_calls\\\": [\" calls \"]}\"\n");
        if (lazy) {
            sy_buf_puts(g, "answer ::= \"{\\\"response\\\": \\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | "
                           "\"u\" [0-9a-fA-F]{4}))* \"\\\"}\"\n");
            sy_buf_puts(g, "root ::= calls-object | answer\n");
        } else {
            sy_buf_puts(g, "root ::= calls-object\n");
        }
        return 0;
    case SY_TOOL_FORMAT_HERMES:
        call_alternatives(x, "\n");
        sy_buf_puts(g, "wrapped ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n");
        sy_buf_printf(g, "body ::= wrapped %s\n", c->parallel ? "(\"\\n\" wrapped)*" : "");
        if (lazy) add_trigger(x, "<tool_call>");
        break;
    case SY_TOOL_FORMAT_LLAMA3:
        call_alternatives(x, "; ");
        sy_buf_puts(g, "body ::= calls\n");
        if (lazy) add_trigger(x, "{\"name\": \"");
        break;
    case SY_TOOL_FORMAT_MISTRAL:
        if (c->traits.mistral_args) {
            call_alternatives(x, "");
            sy_buf_puts(g, "body ::= calls\n");
        } else {
            call_alternatives(x, ", ");
            sy_buf_puts(g, "body ::=");
            marker(x, "[TOOL_CALLS]");
            sy_buf_puts(g, "\"[\" calls \"]\"\n");
        }
        if (lazy) add_trigger(x, "[TOOL_CALLS]");
        break;
    case SY_TOOL_FORMAT_GRANITE:
    case SY_TOOL_FORMAT_PHI4:
        call_alternatives(x, ", ");
        sy_buf_puts(g, "body ::=");
        marker(x, "<|tool_call|>");
        sy_buf_puts(g, "\"[\" calls \"]\"");
        if (f == SY_TOOL_FORMAT_PHI4) marker(x, "<|/tool_call|>");
        sy_buf_puts(g, "\n");
        if (lazy) add_trigger(x, "<|tool_call|>");
        break;
    case SY_TOOL_FORMAT_MINIMAX_M1:
        call_alternatives(x, "\n");
        sy_buf_puts(g, "body ::= \"<tool_calls>\\n\" calls \"\\n</tool_calls>\"\n");
        if (lazy) add_trigger(x, "<tool_calls>");
        break;
    case SY_TOOL_FORMAT_COMMAND_R:
        call_alternatives(x, ",\n    ");
        sy_buf_puts(g, "body ::=");
        marker(x, "<|START_ACTION|>");
        sy_buf_puts(g, "\"[\\n    \" calls \"\\n]\"");
        marker(x, "<|END_ACTION|>");
        sy_buf_puts(g, "\n");
        if (lazy) add_trigger(x, "<|START_ACTION|>");
        break;
    case SY_TOOL_FORMAT_FUNCTIONARY_3_1:
        call_alternatives(x, "");
        sy_buf_puts(g, "body ::= calls\n");
        if (lazy) add_trigger(x, "<function=");
        break;
    case SY_TOOL_FORMAT_FUNCTIONARY_3_2:
        if (lazy) return -1; /* text comes as "all\n...": not a marker a trigger can wait for */
        call_alternatives(x, ">>>");
        sy_buf_puts(g, "body ::= calls\n");
        break;
    case SY_TOOL_FORMAT_DEEPSEEK:
        call_alternatives(x, "");
        sy_buf_puts(g, "body ::=");
        marker(x, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>");
        sy_buf_puts(g, " calls ");
        marker(x, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>");
        sy_buf_puts(g, "\n");
        if (lazy) add_trigger(x, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>");
        break;
    case SY_TOOL_FORMAT_KIMI_K2:
        call_alternatives(x, "");
        sy_buf_puts(g, "body ::=");
        marker(x, "<|tool_calls_section_begin|>");
        sy_buf_puts(g, " calls ");
        marker(x, "<|tool_calls_section_end|>");
        sy_buf_puts(g, "\n");
        if (lazy) add_trigger(x, "<|tool_calls_section_begin|>");
        break;
    case SY_TOOL_FORMAT_GPT_OSS:
        /* One call per message: the recipient in the header, the arguments in the body. */
        x->c->parallel = false;
        call_alternatives(x, "");
        if (lazy) {
            sy_buf_puts(g, "body ::= calls\n");
            add_trigger(x, "to=functions.");
        } else {
            sy_buf_puts(g, "analysis ::=");
            marker(x, "<|channel|>");
            sy_buf_puts(g, "\"analysis\"");
            marker(x, "<|message|>");
            sy_buf_puts(g, "[^<]*");
            marker(x, "<|end|>");
            marker(x, "<|start|>");
            sy_buf_puts(g, "\"assistant\"\nbody ::= analysis?");
            marker(x, "<|channel|>");
            sy_buf_puts(g, "\"commentary \" calls\n");
        }
        break;
    default:
        return -1;
    }
    if (lazy) sy_buf_puts(g, "root ::= body\n");
    else {
        reasoning_prefix(x);
        sy_buf_puts(g, "root ::= prefix body\n");
    }
    return 0;
}

static int build_grammar(sy_http_request *r, const sy_api_model *m, sy_api_chat *c, sy_gen_params *p,
                         sy_api_error *e) {
    bool lazy = c->choice == SY_TOOL_CHOICE_AUTO;
    grammar_ctx x = {.m = m, .c = c, .p = p};
    sy_buf_init(&x.g);
    p->constraint.n_trigger_words = 0;
    p->constraint.n_trigger_tokens = 0;
    if (param_formats(c->parse.format)) {
        if (param_grammar(&x, lazy, e) != 0) {
            sy_buf_free(&x.g);
            return -1;
        }
    } else if (format_grammar(&x, lazy) != 0) {
        sy_buf_free(&x.g);
        p->constraint.n_trigger_words = p->constraint.n_trigger_tokens = 0;
        return 0;
    }
    /* The tools' argument grammars, each under its own prefix. */
    size_t i = 0;
    const cJSON *t;
    sy_schema_options so = sy_schema_defaults();
    cJSON_ArrayForEach(t, c->tools) {
        if (param_formats(c->parse.format)) break;
        const cJSON *params = obj_get(obj_get(t, "function"), "parameters");
        char *gbnf = NULL;
        char err[512] = "";
        if (sy_json_schema_to_gbnf(params, &so, &gbnf, err, sizeof err) != 0) {
            sy_buf_free(&x.g);
            return sy_api_fail(e, 400, "invalid_value", "tools", "tools[%zu].function.parameters: %s", i, err);
        }
        char prefix[32];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        gbnf_prefixed(&x.g, gbnf, prefix);
        free(gbnf);
        i++;
    }
    sy_grammar_cache *cache = sy_api_grammar_cache(sy_api_ctx(r));
    char err[512] = "";
    sy_grammar *g = cache ? sy_grammar_cache_gbnf(cache, x.g.data, x.g.len, err, sizeof err) : NULL;
    if (g == NULL) {
        sy_log(SY_LOG_ERROR, "tool grammar did not compile: %s\n%s", err, x.g.data);
        sy_buf_free(&x.g);
        return sy_api_fail(e, 500, "internal_error", "tools", "the tools' grammar did not compile: %s", err);
    }
    sy_buf_free(&x.g);
    p->constraint.grammar = g;
    return 0;
}

/* ---- prepare ------------------------------------------------------------------------------------------------- */

int sy_api_chat_prepare(sy_http_request *r, const sy_api_model *m, sy_api_chat *c, sy_gen_params *p, char **text,
                        size_t *len, sy_api_error *e) {
    *text = NULL;
    c->tools_active = c->tools != NULL && c->choice != SY_TOOL_CHOICE_NONE;
    if (c->tools_active && p->constraint.grammar != NULL)
        return sy_api_fail(e, 400, "invalid_value", "response_format",
                           "response_format, grammar and json_schema cannot be combined with tools (unless "
                           "tool_choice is \"none\")");
    /* The template requests are rendered with (NULL: a built-in format renders them). */
    char *jinja = sy_api_model_template_text(r, m, c->tools_active);
    sy_template_traits_detect(jinja, &c->traits);
    if (!c->traits.supports_tools) c->traits.tool_format = SY_TOOL_FORMAT_GENERIC;
    memset(&c->parse, 0, sizeof c->parse);
    c->parse.format = c->traits.tool_format;
    c->parse.parse_tools = c->tools_active;
    c->parse.split_reasoning = c->reasoning_format != SY_REASONING_NONE && c->traits.thinking;
    c->parse.think_open = c->traits.think_open;
    c->parse.think_close = c->traits.think_close;
    c->parse.tools = c->tools;
    int rendered = jinja != NULL ? render_template(r, m, c, text, len, e) : 1;
    free(jinja);
    if (rendered < 0) return -1;
    if (rendered > 0) {
        /* A built-in format renders the prompt: tools are then described in the generic format. */
        c->traits.tool_format = SY_TOOL_FORMAT_GENERIC;
        c->traits.supports_tools = false;
        c->parse.format = SY_TOOL_FORMAT_GENERIC;
        if (render_builtin(r, m, c, text, len, e) != 0) return -1;
    }
    /* A prompt that ends inside an open thinking block: the output starts in it. */
    size_t n = *len;
    while (n > 0 && (unsigned char)(*text)[n - 1] <= ' ') n--;
    size_t ol = strlen(c->traits.think_open);
    if (c->traits.thinking && n >= ol && memcmp(*text + n - ol, c->traits.think_open, ol) == 0)
        c->parse.reasoning_open = true;
    if (c->parse.format == SY_TOOL_FORMAT_GPT_OSS || c->parse.format == SY_TOOL_FORMAT_KIMI_K2 ||
        c->parse.format == SY_TOOL_FORMAT_DEEPSEEK || c->parse.format == SY_TOOL_FORMAT_MISTRAL ||
        c->parse.format == SY_TOOL_FORMAT_COMMAND_R)
        p->special_text = true;
    if (c->tools_active && build_grammar(r, m, c, p, e) != 0) {
        free(*text);
        *text = NULL;
        return -1;
    }
    return 0;
}

void sy_api_template_capabilities(const char *jinja, const char *template_file, cJSON *array) {
    char *file_text = NULL;
    if (template_file != NULL) {
        FILE *f = fopen(template_file, "rb");
        sy_buf b;
        sy_buf_init(&b);
        if (f != NULL && sy_buf_read(&b, f, SY_API_MAX_TEMPLATE_BYTES)) file_text = sy_buf_take(&b);
        else sy_buf_free(&b);
        if (f) fclose(f);
    }
    sy_template_traits t;
    sy_template_traits_detect(file_text ? file_text : jinja, &t);
    free(file_text);
    /* Every model takes tools: templates without them get the generic format. */
    cJSON_AddItemToArray(array, cJSON_CreateString("tools"));
    if (t.thinking) cJSON_AddItemToArray(array, cJSON_CreateString("thinking"));
}

cJSON *sy_api_tool_arguments(const sy_tool_call *call) {
    cJSON *v = call->arguments.len ? cJSON_ParseWithLength(call->arguments.data, call->arguments.len) : NULL;
    if (!cJSON_IsObject(v)) {
        cJSON_Delete(v);
        v = cJSON_CreateObject();
    }
    return v;
}

/* The route table of every API the server speaks: admin, OpenAI, Ollama, llama-server's slots. */
#ifndef SY_HOST_API_ROUTES_H
#define SY_HOST_API_ROUTES_H

#include <stddef.h>

#include "http/http_server.h"

const sy_http_route *sy_api_routes(size_t *n);

#endif

/*
 * Management endpoints: /, /health, /running, /unload, /metrics.
 */
#ifndef SY_HOST_API_ADMIN_H
#define SY_HOST_API_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "http/http_server.h"

void sy_api_root(sy_http_request *r);
void sy_api_health(sy_http_request *r);
void sy_api_running(sy_http_request *r);
void sy_api_unload(sy_http_request *r);
void sy_api_metrics(sy_http_request *r);
/* POST /reload: the config file read again, as SIGHUP does (400 with the reason when refused). */
void sy_api_reload(sy_http_request *r);

#endif

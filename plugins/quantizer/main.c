/* switchyard-quantize: the program that `switchyard quantize` runs (host/cli/cmd_quantize.c), so that the host
 * executable links none of the model-format code this needs. */
#include "quantizer.h"

int main(int argc, char **argv) { return sy_quantize_main(argc, argv); }

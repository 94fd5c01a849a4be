/* The quantizer behind `switchyard quantize`, as a function so tests can run it in-process. */
#ifndef SY_QUANTIZER_H
#define SY_QUANTIZER_H

/* argv[0] is ignored; the rest are the verb's arguments (see its --help). Returns the exit status: 0 done, 1 the
 * input or output failed (one message on stderr), 2 a usage error. */
int sy_quantize_main(int argc, char **argv);

#endif

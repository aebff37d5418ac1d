/* seqkv: one binary, subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: seqkv <command> [<args>]\n"
    "\n"
    "seqkv stores LLM key/value caches losslessly, spending bits only on what\n"
    "the model could not predict.\n"
    "\n"
    "commands:\n"
    "  model info      describe a model checkpoint\n"
    "  model greedy    greedy-decode after BOS, print the ids\n"
    "  model sample    sample token sequences (seeded)\n"
    "  model kv        compute the KV caches of token sequences\n"
    "  model convert   write a checkpoint as Hugging Face safetensors\n"
    "  codec calibrate learn the predictors' calibration from KV files\n"
    "  codec encode    code a KV file losslessly\n"
    "  codec decode    decode it back, bit-exact\n"
    "  codec bench     bits per scalar and speed of every level vs zstd\n"
    "  put             store KV caches (a KV file, or computed by a model)\n"
    "  lookup          longest cached prefix of token sequences\n"
    "  get             write cached KV as a KV file\n"
    "  del             delete cached sequences\n"
    "  stats           what a store holds, raw and stored bytes\n"
    "  calibrate       learn a store profile's calibration from its sequences\n"
    "  compact         re-code a store's records at their profile's level, merge appends\n"
    "  profile         list, show or set a store's model profiles (list|get|set)\n"
    "  tenant          a tenant's budget and shared-namespace opt-in (set), or\n"
    "                  crypto-shred a tenant (forget)\n"
    "  bench store     a multi-tenant chat workload at every level vs baselines\n"
    "  serve           serve a store over RESP on a Unix socket (redis-cli works)\n"
    "  demo            the main job: a server, a multi-tenant chat workload, a summary\n"
    "\n"
    "Run 'seqkv <command> --help' for the options of each.\n"
    "'seqkv --verbose <command> ...' (or SEQKV_VERBOSE=1) adds to an error\n"
    "message its code and where in seqkv's source it was detected.\n";

int main(int argc, char **argv)
{
    cli_verbose_init();
    if (argc >= 2 && strcmp(argv[1], "--verbose") == 0) {
        cli_verbose = 1;
        argv[1] = argv[0];
        argc--;
        argv++;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("seqkv %s\n", SEQKV_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "model") == 0)
        return cmd_model(argc - 1, argv + 1);
    if (strcmp(argv[1], "codec") == 0)
        return cmd_codec(argc - 1, argv + 1);
    if (strcmp(argv[1], "bench") == 0)
        return cmd_bench(argc - 1, argv + 1);
    if (strcmp(argv[1], "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    if (strcmp(argv[1], "demo") == 0)
        return cmd_demo(argc - 1, argv + 1);
    static const char *const store_cmds[] = {"put", "lookup", "get", "del", "stats",
                                             "calibrate", "profile", "tenant", "compact"};
    for (size_t i = 0; i < sizeof store_cmds / sizeof store_cmds[0]; i++)
        if (strcmp(argv[1], store_cmds[i]) == 0)
            return cmd_store(argc - 1, argv + 1);
    fprintf(stderr, "seqkv: unknown command '%s'\n\n%s", argv[1], usage);
    return 2;
}

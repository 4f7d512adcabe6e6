/* What one nvmlDeviceGetFieldValues call costs in CPU, by the fields it asks for: the slow
 * tier's call as gpuwarden makes it, as the C loop made it before it followed the driver's
 * numbering, and each group of fields alone; with what each field answered (return code and
 * value, the IDs as sent). docs/performance.md, "The loop asked for other fields".
 *
 *   gcc -O2 -o field-values-cost scripts/gpu/field-values-cost.c -I/usr/local/cuda/include -l:libnvidia-ml.so.1
 *   ./field-values-cost [ROUNDS]      (GPU 0; each set once per round, 0.4 s apart)
 *
 * Calls are spaced out because a call repeated at once is answered from the driver's caches
 * and reads lower; the first round is left out of the means (the first call pays set-up).
 * The IDs are numbers, not nvml.h's names, so that the program means the same on any
 * header: 74/76 are the power-cap and sync-boost counters, 142-145 the row remapping, 230 the
 * recovery action, 251-253 the three other clock-event counters in CUDA 12's numbering and
 * power-smoothing fields on drivers from 580.82 on, where those counters are 269-271. */
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct set {
    const char *name;
    unsigned n;
    unsigned ids[12];
};

static const struct set sets[] = {
    {"the loop before, as sent (142-145,74,76,251-253)", 9, {142, 143, 144, 145, 74, 76, 251, 252, 253}},
    {"gpuwarden's slow tier on 580.82+ (230,142-145,74,76,269-271)", 10, {230, 142, 143, 144, 145, 74, 76, 269, 270, 271}},
    {"the same without the recovery action", 9, {142, 143, 144, 145, 74, 76, 269, 270, 271}},
    {"the clock-event counters 269-271", 3, {269, 270, 271}},
    {"the counters 74,76", 2, {74, 76}},
    {"row remapping 142-145", 4, {142, 143, 144, 145}},
    {"the recovery action 230", 1, {230}},
    {"251-253 as sent", 3, {251, 252, 253}},
    {"row remapping and the recovery action (230,142-145)", 5, {230, 142, 143, 144, 145}},
};
#define SETS (sizeof sets / sizeof *sets)

static double thread_cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    if (rounds < 2)
        rounds = 2;
    char version[96] = "";
    nvmlDevice_t device;
    if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &device) != NVML_SUCCESS) {
        fprintf(stderr, "field-values-cost: no NVML or no GPU 0\n");
        return 1;
    }
    nvmlSystemGetDriverVersion(version, sizeof version);
    double total[SETS] = {0};
    nvmlFieldValue_t last[SETS][12];
    for (int round = 0; round < rounds; round++)
        for (unsigned k = 0; k < SETS; k++) {
            struct timespec pause = {0, 400000000};
            nanosleep(&pause, NULL);
            nvmlFieldValue_t values[12];
            memset(values, 0, sizeof values);
            for (unsigned i = 0; i < sets[k].n; i++)
                values[i].fieldId = sets[k].ids[i];
            double before = thread_cpu_us();
            nvmlDeviceGetFieldValues(device, (int)sets[k].n, values);
            double spent = thread_cpu_us() - before;
            if (round > 0)
                total[k] += spent;
            memcpy(last[k], values, sizeof values);
        }
    printf("driver %s; CPU a call, mean of %d calls 0.4 s apart in turn\n", version, rounds - 1);
    for (unsigned k = 0; k < SETS; k++) {
        printf("%8.1f us  %s:", total[k] / (rounds - 1), sets[k].name);
        for (unsigned i = 0; i < sets[k].n; i++)
            printf(" %u=%d/%llu", last[k][i].fieldId, last[k][i].nvmlReturn, last[k][i].value.ullVal);
        printf("\n");
    }
    nvmlShutdown();
    return 0;
}

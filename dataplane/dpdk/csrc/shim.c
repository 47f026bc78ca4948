/* What bindgen cannot wrap: rte_errno is a per-lcore (thread-local)
 * variable behind a macro. Read it on the thread of the failed call. */
#include "wrapper.h"

int shim_rte_errno(void)
{
    return rte_errno;
}

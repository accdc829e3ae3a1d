// C ABI of paddle_ngraph's oneCCL transport: the communicator of every rank of the job, and
// communicators of groups of ranks, each over a key-value store of its own (pdng_ccl_group_*).
// Every call returns 0 on success; on failure, a nonzero code and a message
// available from pdng_ccl_last_error() naming the operation, dtype and rank.
#ifndef PDNG_CCL_H_
#define PDNG_CCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum pdng_dtype { PDNG_FLOAT32 = 0, PDNG_FLOAT64, PDNG_FLOAT16, PDNG_BFLOAT16, PDNG_INT32, PDNG_INT64, PDNG_UINT8 };
enum pdng_reduction { PDNG_SUM = 0, PDNG_PROD, PDNG_MIN, PDNG_MAX };

#define PDNG_CCL_ADDRESS_MAX 4096

const char* pdng_ccl_last_error(void);
// Rank 0: initializes oneCCL and creates the main key-value store; writes its address.
int pdng_ccl_create_main_kvs(char* address, size_t capacity, size_t* length);
// Every rank: joins the store (rank 0 reuses its own) and creates the communicator.
int pdng_ccl_create_communicator(const char* address, size_t length, int size, int rank);
int pdng_ccl_allreduce(const void* send, void* recv, size_t count, int dtype, int reduction);
int pdng_ccl_broadcast(void* buffer, size_t count, int dtype, int root);
int pdng_ccl_allgather(const void* send, void* recv, size_t count, int dtype);
int pdng_ccl_reduce_scatter(const void* send, void* recv, size_t recv_count, int dtype, int reduction);
// Point-to-point. oneCCL has no tags: messages between two ranks match in order.
int pdng_ccl_send(const void* buffer, size_t count, int dtype, int peer);
int pdng_ccl_recv(void* buffer, size_t count, int dtype, int peer);
int pdng_ccl_barrier(void);
// Groups. A group's first rank makes its store (pdng_ccl_group_store: a new slot, the store's
// address); every member then joins with that address (pdng_ccl_group_join: the first rank passes
// its slot, the others -1 and get a new one), collectively over the group. The collectives below
// take the slot.
int pdng_ccl_group_store(int* slot, char* address, size_t capacity, size_t* length);
int pdng_ccl_group_join(int* slot, const char* address, size_t length, int size, int rank);
int pdng_ccl_group_allreduce(int slot, const void* send, void* recv, size_t count, int dtype, int reduction);
int pdng_ccl_group_broadcast(int slot, void* buffer, size_t count, int dtype, int root);
int pdng_ccl_group_allgather(int slot, const void* send, void* recv, size_t count, int dtype);
int pdng_ccl_group_reduce_scatter(int slot, const void* send, void* recv, size_t recv_count, int dtype,
                                  int reduction);
// Destroys the communicators before their stores, as oneCCL needs at exit.
void pdng_ccl_finalize(void);

#ifdef __cplusplus
}
#endif
#endif  // PDNG_CCL_H_

export { Worker, RetryAfter, Backpressure, PermanentError } from "./worker.js";
export type { Handler, Logger, WorkerOptions } from "./worker.js";
export { createClients } from "./client.js";
export type { ClientOptions, Clients } from "./client.js";
export type { Job } from "./gen/conveyor/v1/task_pb.js";

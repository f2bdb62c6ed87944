// The generated connect-es clients of conveyor.v1 (src/gen/ is made by
// `buf generate` at build) over connect-node's Connect transport, with the
// bearer token set on every call.
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AdminService } from "./gen/conveyor/v1/admin_pb.js";
import { TaskService } from "./gen/conveyor/v1/task_pb.js";
import { WorkerService } from "./gen/conveyor/v1/worker_pb.js";

export interface ClientOptions {
  /** Sent as "Authorization: Bearer <token>": [server] worker_token (or admin_token). */
  token?: string;
  /** The proto3 JSON mapping instead of binary protobuf (the default). */
  useJson?: boolean;
}

export interface Clients {
  worker: Client<typeof WorkerService>;
  task: Client<typeof TaskService>;
  admin: Client<typeof AdminService>; // needs the admin token
}

/** Clients of WorkerService, TaskService and AdminService at baseUrl ("http://host:port"). */
export function createClients(baseUrl: string, options: ClientOptions = {}): Clients {
  const interceptors: Interceptor[] = [];
  const token = options.token;
  if (token) {
    interceptors.push((next) => async (req) => {
      req.header.set("Authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  // HTTP/1.1: the admin server speaks it (Connect unary needs nothing more).
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: "1.1",
    useBinaryFormat: !options.useJson,
    interceptors,
  });
  return {
    worker: createClient(WorkerService, transport),
    task: createClient(TaskService, transport),
    admin: createClient(AdminService, transport),
  };
}

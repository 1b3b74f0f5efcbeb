import { createHmac, timingSafeEqual } from "node:crypto";

/** Verifies a botpool webhook (Standard Webhooks): its signature over the raw body, and a timestamp within tolerance. */
export function verifyWebhook(secret: string, headers: Record<string, string | undefined>, body: string,
  now = Date.now() / 1000, toleranceSeconds = 300): boolean {
  secret = secret.trim(); // as botpool does: a Secret made with --from-file ends with a newline
  const key = secret.startsWith("whsec_") ? Buffer.from(secret.slice(6), "base64") : Buffer.from(secret);
  const id = headers["webhook-id"], ts = headers["webhook-timestamp"], sigs = headers["webhook-signature"];
  // Strictly: a missing or non-numeric timestamp is no timestamp (Math.abs(NaN) > 300 is false).
  if (!id || !ts || !sigs || !/^[0-9]{1,15}$/.test(ts) || Math.abs(now - Number(ts)) > toleranceSeconds) return false;
  const want = Buffer.from("v1," + createHmac("sha256", key).update(`${id}.${ts}.${body}`).digest("base64"));
  return sigs.split(" ").some((s) => {
    const got = Buffer.from(s);
    return got.length === want.length && timingSafeEqual(got, want);
  });
}

/**
 * One error root, as in cms_core.errors: every error this package throws is an OCMSError with a
 * specific subclass and a message naming what to fix.
 */

export class OCMSError extends Error {
  constructor(message: string) {
    super(message);
  }

  // A literal, not new.target.name: the minified bundle renames classes.
  override name = "OCMSError";
}

/** A device configuration (`ocms registry device-config`) that is not usable: names the metric and field. */
export class InvalidConfigError extends OCMSError {
  override name = "InvalidConfigError";
}

/** A value outside the metric's dictionary: refused before any random byte is drawn or any epsilon charged. */
export class InvalidValueError extends OCMSError {
  override name = "InvalidValueError";
}

/** The device config asks for a newer client release for this metric (`min_client_version`): names the release
 *  to upgrade to. Nothing was drawn, charged or queued. */
export class ClientTooOldError extends OCMSError {
  override name = "ClientTooOldError";
}

/** A metric the configuration does not hold. */
export class UnknownMetricError extends OCMSError {
  override name = "UnknownMetricError";
}

/** An argument of the API that is not what it must be (a budget <= 0, a bad URL, ...). */
export class InvalidParameterError extends OCMSError {
  override name = "InvalidParameterError";
}

/** The charge would take the metric's spend in this period above the budget: nothing was sent. */
export class PrivacyBudgetError extends OCMSError {
  override name = "PrivacyBudgetError";
  constructor(message: string, readonly metric: string, readonly period: number, readonly spent: number,
              readonly requested: number, readonly budget: number) {
    super(message);
  }
}

/** The offline queue holds its maximum of reports: nothing was charged, report again later. */
export class QueueFullError extends OCMSError {
  override name = "QueueFullError";
}

/** An upload the collector refused for good (a 4xx other than 408/429), or a closed client. */
export class DeliveryError extends OCMSError {
  override name = "DeliveryError";
  constructor(message: string, readonly status: number | null, readonly reason: string | null,
              readonly reports: number) {
    super(message);
  }
}

/** A message that is not valid wire-v1; `reason` is the collector's / dead-letter reason code. */
export class WireFormatError extends OCMSError {
  override name = "WireFormatError";
  constructor(message: string, readonly reason: string) {
    super(message);
  }
}

/** The platform has no CSPRNG (crypto.getRandomValues): this client never falls back to Math.random. */
export class NoRandomnessError extends OCMSError {
  override name = "NoRandomnessError";
}

/** The ledger or queue storage failed (file, localStorage quota, lock timeout). */
export class StorageError extends OCMSError {
  override name = "StorageError";
}

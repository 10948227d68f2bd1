import BLEParsing

/// A whole import fed a block at a time, as `import-btsnoop` reads the
/// file: ``BtsnoopStream`` frames records, ``CaptureAnalyzer`` (without
/// keeping advertisements) reads them, and ``ScenarioImporter/Builder``
/// folds each advertisement into its device's timeline after every block.
/// What is held is the scenario being built, not the capture.
///
///     var importer = StreamingImport(options: options)
///     while let block = read(), try importer.append(block) {}
///     let result = try importer.finish()
public struct StreamingImport: Sendable {
    private var stream = BtsnoopStream()
    private var analyzer: CaptureAnalyzer?
    private var builder: ScenarioImporter.Builder

    public init(options: ScenarioImporter.Options) {
        builder = ScenarioImporter.Builder(options: options)
    }

    /// Takes the next bytes of the file. False once reading can stop: the
    /// scenario can no longer fit ``ScenarioImporter/Options/sizeLimit``
    /// (the result says so). Throws for a bad header or an impossible record.
    public mutating func append(_ block: some Collection<UInt8>) throws(CaptureError) -> Bool {
        guard !builder.exceedsSizeLimit else { return false }
        stream.append(block)
        while let record = try stream.next() {
            if analyzer == nil, let datalink = stream.datalink {
                analyzer = CaptureAnalyzer(datalink: datalink, keepsAdvertisements: false)
            }
            analyzer?.add(record)
        }
        if let advertisements = analyzer?.takeAdvertisements() {
            builder.add(advertisements, firstTimestamp: analyzer?.timeline.firstTimestamp)
        }
        return !builder.exceedsSizeLimit
    }

    /// The file has ended: the scenario. Throws if it ended inside the
    /// header or a record (unless the size limit had already stopped reading).
    public mutating func finish() throws(CaptureError) -> ScenarioImporter.Result {
        if !builder.exceedsSizeLimit { try stream.finish() }
        // Past stream.finish() the header was whole, so the datalink is known
        // (a file of a header alone has no analyzer yet).
        var a = analyzer ?? CaptureAnalyzer(datalink: stream.datalink ?? .hciUART, keepsAdvertisements: false)
        a.endOfCapture()
        builder.add(a.takeAdvertisements(), firstTimestamp: a.timeline.firstTimestamp)
        analyzer = nil
        return builder.finish(a.finish())
    }
}
